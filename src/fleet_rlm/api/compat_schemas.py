"""Bodies of the OpenAI-compatible API (``/v1``): the subset of OpenAI's chat completions that chat
UIs and SDKs send and read. Fields OpenAI defines and Fleet has no use for (``temperature``,
``max_tokens``, ``tools``, ...) are accepted and ignored, as other compatible servers do."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from fleet_rlm.api.text import NUL_MESSAGE, Text, nul_location

MAX_MESSAGES = 1000
USER_RULE = "binds the call to a session, like X-Fleet-Session (which wins): a session id, or a name"


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Text = Field(description="Only `text` parts are read; any other type is refused (400)")
    text: Text | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = Field(False, description="Send one last chunk with the usage and no choices")


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Text = Field(description="`fleet-rlm` (the session's mode) or `fleet-rlm/<mode>`; see GET /v1/models")
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The conversation: the last message (a user's) is the task, the ones before it the history. "
        "A body past the server's JSON body limit (`FLEET_JSON_BODY_LIMIT_KB`) is refused with 413 "
        "before it is read, whatever it holds",
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: Text | None = Field(None, max_length=200, description=USER_RULE)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        """A NUL anywhere in the body is refused naming where (a content union would hide it)."""
        where = nul_location(data)
        if where is not None:
            raise PydanticCustomError("nul_character", "{text}", {"text": f"{NUL_MESSAGE} (at {where or '/'})"})
        return data


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


FinishReason = Literal["stop", "length"]
"""``stop``: answered; ``length``: the turn's budget ran out and its answer says there is no result."""


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    reasoning_content: str = Field(description="What the turn did: reasoning, code, output summaries")


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str = Field(description="chatcmpl- and the turn's id")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` frame of a streamed completion (the stream ends with ``data: [DONE]``)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None


CHUNK_REF = "#/components/schemas/ChatCompletionChunk"
CHUNK_STREAM: dict[str, Any] = {
    # OpenAPI 3.2's form for sequential media types, as for a turn's event stream.
    "itemSchema": {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {
                "type": "string",
                "description": "a ChatCompletionChunk as JSON, an OpenAI error object, or [DONE]",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": CHUNK_REF},
            }
        },
    }
}


def add_chunk_schema(document: dict[str, Any]) -> dict[str, Any]:
    """Add ChatCompletionChunk (and the models it uses) to the document's components: only the
    stream's item schema names it, so FastAPI does not."""
    schema = ChatCompletionChunk.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, inner in schema.pop("$defs", {}).items():
        schemas.setdefault(name, inner)
    schemas["ChatCompletionChunk"] = schema
    return document
