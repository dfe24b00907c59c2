"""The official openai SDK against a live gateway in front of a live enginesim."""

import pytest

from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.usage_records import recorded

MESSAGES = [{"role": "user", "content": "Say something about fair sharing."}]



def test_chat_completion_answers_and_is_counted(cast, openai_for):
    client = openai_for(cast["alice"])
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=12)
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens == 12 or reply.choices[0].finish_reason == "stop"
    assert raw.headers["x-gpuportal-replica"] == "sim-a"
    record = recorded(raw.headers["x-request-id"])
    assert record.prompt_tokens == reply.usage.prompt_tokens
    assert record.completion_tokens == reply.usage.completion_tokens
    assert (record.status, record.stream, record.key_id) == (200, False, cast["alice"].key_id)


def test_streamed_chat_passes_through_and_is_counted_without_the_client_asking(cast, openai_for):
    client = openai_for(cast["bob"])
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=20, stream=True, extra_body={"ignore_eos": True}
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    # The gateway asked the engine for usage; the client, who did not, never sees that chunk.
    assert all(c.choices for c in chunks)
    record = recorded(raw.headers["x-request-id"])
    assert record.stream and record.status == 200
    assert record.completion_tokens == 20 and record.prompt_tokens > 0
    assert record.ttft_ms is not None


def test_a_client_that_asks_for_stream_usage_gets_it(cast, openai_for):
    client = openai_for(cast["bob"])
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    ))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


@pytest.mark.parametrize("stream", [False, True])
def test_completions_work_streamed_or_not(cast, openai_for, stream):
    client = openai_for(cast["carol"])
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt="Once upon a time", max_tokens=8, stream=stream, extra_body={"ignore_eos": True}
    )
    result = raw.parse()
    text = "".join(c.choices[0].text for c in result if c.choices) if stream else result.choices[0].text
    assert text
    record = recorded(raw.headers["x-request-id"])
    assert (record.endpoint, record.completion_tokens, record.stream) == ("completions", 8, stream)


def test_models_lists_what_the_replicas_serve(cast, openai_for):
    models = openai_for(cast["alice"]).models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_models_retrieve_answers_the_model_or_an_openai_shaped_404(cast, openai_for):
    import openai

    from fairness.models import Replica

    client = openai_for(cast["alice"])
    model = client.models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "gpuportal")
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-99")
    assert (missing.value.code, missing.value.param) == ("model_not_found", "model")
    assert "gpt-99" in missing.value.message
    # A model id with a slash in it, as Hugging Face names are.
    Replica.objects.create(name="sim-hf", base_url="http://127.0.0.1:9", model="org/tiny-7b", max_num_seqs=1)
    wait_for(lambda: "org/tiny-7b" in [m.id for m in client.models.list().data], what="the new replica")
    assert client.models.retrieve("org/tiny-7b").id == "org/tiny-7b"


def test_several_choices_or_prompts_in_one_request_are_refused_before_the_engine(cast, openai_for, sim):
    import openai

    client = openai_for(cast["alice"])
    seen = len(sim.requests())
    with pytest.raises(openai.BadRequestError) as choices:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, n=3)
    with pytest.raises(openai.BadRequestError) as prompts:
        client.completions.create(model=MODEL, prompt=["one", "two"], max_tokens=4)

    assert (choices.value.code, choices.value.param) == ("unsupported_value", "n")
    assert (prompts.value.code, prompts.value.param) == ("unsupported_value", "prompt")
    assert "one sequence per request" in choices.value.message
    assert len(sim.requests()) == seen
