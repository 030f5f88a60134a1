"""rcagent: offline root-cause analysis of cloud and microservice incidents with a locally served model."""
__version__ = "0.1.0"
