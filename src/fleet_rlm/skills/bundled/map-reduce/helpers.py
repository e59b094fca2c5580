"""Helpers of the ``map-reduce`` skill: a question over a long text, one sub-model call per chunk.

Runs in the sandbox, standard library only. The model passes in its own ``llm_query_batched``
(and ``llm_query``): the helpers never call a model by themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

Batched = Callable[[list[str]], list[str]]
Single = Callable[[str], str]
NOTHING = "NONE"

MAP_PROMPT = """You are reading chunk {index} of {total} of a longer document.

Question: {question}

{instructions}If this chunk holds nothing that helps answer the question, reply with exactly {nothing}.

--- chunk {index} of {total} ---
{chunk}
--- end of chunk {index} ---"""

MAP_INSTRUCTIONS = (
    "Reply with what this chunk says that answers the question: quote figures, names and dates "
    "exactly, briefly, without guessing beyond the text.\n"
)

REDUCE_PROMPT = """Partial answers to one question, each from one chunk of a long document, labelled by chunk:

{partials}

Question: {question}

Combine them into one answer. Keep exact figures and quotes, cite the chunks they come from as
[chunk N], and say where the partial answers disagree instead of picking one silently."""


def chunk_text(text: str, max_chars: int = 8000, overlap: int = 400) -> list[str]:
    """``text`` cut into pieces of at most ``max_chars``, each starting ``overlap`` characters before
    the previous one ended, cut at a paragraph break, else a line break, else a space when possible."""
    if max_chars <= 0 or not 0 <= overlap < max_chars:
        raise ValueError("need max_chars > 0 and 0 <= overlap < max_chars")
    chunks, start = [], 0
    while start < len(text):
        end = min(len(text), start + max_chars)
        if end < len(text):
            window = text[start:end]
            for separator in ("\n\n", "\n", " "):
                cut = window.rfind(separator)
                if cut > max_chars // 2:
                    end = start + cut + len(separator)
                    break
        chunks.append(text[start:end])
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return chunks


def prefilter(chunks: Sequence[str], patterns: Sequence[str], flags: int = re.IGNORECASE) -> list[str]:
    """The chunks in which any of ``patterns`` (regular expressions; plain words work) occurs."""
    compiled = [re.compile(pattern, flags) for pattern in patterns]
    return [chunk for chunk in chunks if any(pattern.search(chunk) for pattern in compiled)]


def map_prompts(chunks: Sequence[str], question: str, instructions: str = MAP_INSTRUCTIONS) -> list[str]:
    """One prompt per chunk asking ``question`` of it (reply ``NONE`` when it holds nothing relevant)."""
    if instructions and not instructions.endswith("\n"):
        instructions += "\n"
    total = len(chunks)
    return [
        MAP_PROMPT.format(
            index=index, total=total, question=question, instructions=instructions, nothing=NOTHING, chunk=chunk
        )
        for index, chunk in enumerate(chunks, 1)
    ]


def is_nothing(reply: str) -> bool:
    """Whether a map reply says the chunk held nothing relevant."""
    return reply.strip().strip(".").strip().upper() in (NOTHING, "")


def map_reduce(
    source: str | Sequence[str],
    question: str,
    llm_query_batched: Batched,
    llm_query: Single | None = None,
    *,
    chunk_chars: int = 8000,
    overlap: int = 400,
    max_chunks: int = 64,
    reduce_chars: int = 24_000,
) -> dict[str, Any]:
    """Answer ``question`` over a long text (or a list of chunks): map every chunk with one batched
    call, keep the replies that found something, reduce them (in rounds when they are long).

    Returns ``answer``, ``partials`` (the kept map replies, labelled ``[chunk N]``), ``chunks`` (how
    many were mapped) and ``calls`` (model calls made). Raises ValueError before any call when there
    would be more than ``max_chunks`` chunks.
    """
    chunks = chunk_text(source, chunk_chars, overlap) if isinstance(source, str) else list(source)
    if len(chunks) > max_chunks:
        raise ValueError(
            f"{len(chunks)} chunks would take {len(chunks)} model calls (max_chunks={max_chunks}): "
            "prefilter the chunks, use larger ones, or raise max_chunks if the budget allows"
        )
    if not chunks:
        return {"answer": "The text is empty.", "partials": [], "chunks": 0, "calls": 0}
    replies = llm_query_batched(map_prompts(chunks, question))
    calls = len(chunks)
    partials = [f"[chunk {index}] {reply.strip()}" for index, reply in enumerate(replies, 1) if not is_nothing(reply)]
    if not partials:
        return {
            "answer": "No part of the text holds information that answers the question.",
            "partials": [],
            "chunks": len(chunks),
            "calls": calls,
        }
    answer, reduce_calls = _reduce(partials, question, llm_query_batched, llm_query, reduce_chars)
    return {"answer": answer, "partials": partials, "chunks": len(chunks), "calls": calls + reduce_calls}


def _reduce(
    partials: list[str], question: str, batched: Batched, single: Single | None, reduce_chars: int
) -> tuple[str, int]:
    calls = 0
    while True:
        groups = _groups(partials, reduce_chars)
        prompts = [REDUCE_PROMPT.format(partials="\n\n".join(group), question=question) for group in groups]
        if len(prompts) == 1:
            answer = single(prompts[0]) if single is not None else batched(prompts)[0]
            return answer.strip(), calls + 1
        partials = [reply.strip() for reply in batched(prompts)]
        calls += len(prompts)


def _groups(partials: list[str], limit: int) -> list[list[str]]:
    """Consecutive partials packed into groups of at most ``limit`` characters (a longer one alone)."""
    groups: list[list[str]] = [[]]
    size = 0
    for partial in partials:
        if groups[-1] and size + len(partial) > limit:
            groups.append([])
            size = 0
        groups[-1].append(partial)
        size += len(partial) + 2
    if len(groups) > 1 and len(groups) == len(partials):  # every partial alone: pair them up to converge
        groups = [partials[i : i + 2] for i in range(0, len(partials), 2)]
    return groups
