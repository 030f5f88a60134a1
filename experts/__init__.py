"""Expert agents (log expert, code expert): LLM sub-agents that cite evidence. Built in a later issue."""
