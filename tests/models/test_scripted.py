import json

import httpx

from fleet_rlm.models.scripted import Reply, ScriptedModelServer


def test_replies_are_served_in_order_per_model() -> None:
    with ScriptedModelServer() as server:
        server.script("root", "first", "second")
        server.script("sub", "sub-answer")
        with httpx.Client(base_url=server.base_url) as client:
            texts = [
                client.post("/chat/completions", json={"model": m, "messages": []}).json()["choices"][0]["message"][
                    "content"
                ]
                for m in ("root", "sub", "root")
            ]
    assert texts == ["first", "sub-answer", "second"]


def test_streaming_reply_arrives_in_chunks_with_usage() -> None:
    with ScriptedModelServer(stream_chunk_chars=4) as server:
        server.script("root", Reply(text="hello world", prompt_tokens=7, completion_tokens=3))
        with (
            httpx.Client(base_url=server.base_url) as client,
            client.stream("POST", "/chat/completions", json={"model": "root", "messages": [], "stream": True}) as r,
        ):
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "hello world"
    assert len(chunks) > 3
    assert chunks[-1]["usage"]["total_tokens"] == 10


def test_unscripted_model_gets_a_clear_error() -> None:
    with ScriptedModelServer() as server, httpx.Client(base_url=server.base_url) as client:
        response = client.post("/chat/completions", json={"model": "nobody", "messages": []})
    assert response.status_code == 500
    assert "no reply left for model 'nobody'" in response.json()["error"]["message"]
