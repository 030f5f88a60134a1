"""Text scores of a diagnosis against the reference texts the importers wrote (RCAgent §4.1).

METEOR (nltk, WordNet from Debian via rcagent.eval.wordnet, whitespace tokens since no tokenizer data is
installed), an embedding score (cosine similarity of the bundled all-MiniLM-L6-v2 sentence embeddings), and
BLEURT when the user points to a local checkpoint. Everything runs offline; nothing is downloaded.
"""
from __future__ import annotations

from pathlib import Path

from rcagent.embedding import embedder
from rcagent.errors import BadInput

FIELDS = (("rc", "root_cause", "ref_root_cause"), ("sol", "solution", "ref_solution"))


def meteor(hypothesis: str, reference: str) -> float:
    from nltk.translate.meteor_score import meteor_score

    if not hypothesis.strip() or not reference.strip():
        return 0.0
    try:
        return float(meteor_score([reference.split()], hypothesis.split()))
    except LookupError:
        raise BadInput("METEOR needs WordNet, which is not installed: run `make install` (it installs the "
                       "Debian packages wordnet-base and wordnet-sense-index and runs python -m rcagent.eval.wordnet)") from None


def embedding_scores(hypotheses: list[str], references: list[str]) -> list[float]:
    """Cosine similarity of each hypothesis with its reference (0 for an empty hypothesis)."""
    model = embedder()
    h = model.encode(hypotheses, normalize_embeddings=True, batch_size=64)
    r = model.encode(references, normalize_embeddings=True, batch_size=64)
    return [float((a * b).sum()) if hyp.strip() else 0.0 for a, b, hyp in zip(h, r, hypotheses)]


def bleurt_scores(checkpoint: Path, hypotheses: list[str], references: list[str]) -> list[float]:
    """BLEURT with a local checkpoint in the bleurt-pytorch format (untested here: none is obtainable offline)."""
    if not (checkpoint / "config.json").is_file():
        raise BadInput(f"--bleurt {checkpoint}: not a BLEURT checkpoint folder (no config.json). Convert or copy a "
                       "checkpoint such as lucadiliello/BLEURT-20-D12 to the machine first.")
    try:
        import torch
        from bleurt_pytorch import BleurtForSequenceClassification, BleurtTokenizer
    except ImportError:
        raise BadInput("--bleurt needs the bleurt-pytorch package (pip install bleurt-pytorch)") from None
    tokenizer = BleurtTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
    model = BleurtForSequenceClassification.from_pretrained(str(checkpoint), local_files_only=True).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(hypotheses), 16):
            batch = tokenizer(references[i:i + 16], hypotheses[i:i + 16], padding="longest", truncation=True,
                              return_tensors="pt")
            out += model(**batch).logits.flatten().tolist()
    return out


def add_text_scores(cases: list[dict], bleurt: Path | None = None) -> list[str]:
    """Add meteor_/embed_/bleurt_ scores for root cause (rc) and solution (sol) to each case; returns notes."""
    notes = []
    for short, field, ref in FIELDS:
        scored = [c for c in cases if c[ref]]
        for c in scored:
            c[f"meteor_{short}"] = round(meteor(c[field], c[ref]), 4)
        embeds = embedding_scores([c[field] for c in scored], [c[ref] for c in scored])
        for c, e in zip(scored, embeds):
            c[f"embed_{short}"] = round(e, 4)
        if bleurt:
            for c, b in zip(scored, bleurt_scores(bleurt, [c[field] for c in scored], [c[ref] for c in scored])):
                c[f"bleurt_{short}"] = round(b, 4)
        if len(scored) < len(cases):
            notes.append(f"{len(cases) - len(scored)} cases have no reference {field} text")
    if not bleurt:
        notes.append("BLEURT not scored: pass --bleurt DIR with a local checkpoint to add it")
    return notes
