"""The diagnosis: ranked root-cause entities, explanation, solution, evidence, and the run's figures."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RootCause:
    entity: str
    kind: str
    score: float


@dataclass
class Diagnosis:
    job: str
    run_id: str
    root_causes: list[RootCause] = field(default_factory=list)
    model_root_causes: list[str] = field(default_factory=list)  # the model's own picks, before fusion
    root_cause: str = ""
    solution: str = ""
    evidence: list[str] = field(default_factory=list)
    responsibility: str = ""
    finalized: bool = False          # False when the step limit (or an error) forced a best-effort answer
    steps: int = 0
    invalid_steps: int = 0
    repaired_steps: int = 0          # valid steps whose output JsonRegen had to repair
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    backend: str = ""
    model: str = ""
    mode: str = "react"
    note: str = ""
    consistency: dict = field(default_factory=dict)   # self-consistency: candidates, agreement (empty if off)
    span: dict = field(default_factory=dict)          # span mode: request, path, pool, evidence graph
    graph: dict = field(default_factory=dict)         # graph mode: the walk, its start, linked logs, picture
    redacted: dict = field(default_factory=dict)      # kind -> distinct values replaced by placeholders in the job
    warnings: list[str] = field(default_factory=list) # how the job was read (Job.warnings): what it could not compare

    def to_dict(self) -> dict:
        return asdict(self)
