"""Generation scores: the SQuAD-style scores and ROUGE-L on known values, prompts and references from tokenized rows,
greedy generation on the tiny GPT-2."""

from __future__ import annotations

import pytest

from finesweep.trainer.serving.generate import (exact_match, generate_answers, last_response_span, lcs_length,
                                                normalize, prompts_and_references, rouge_l, score_generation,
                                                score_texts, split_row, token_f1)
from tests.exports import causal_lm_split

I = -100  # a label the loss ignores


def test_normalize_drops_case_punctuation_articles_and_extra_space():
    assert normalize("  The  Cat,  sat on A mat! ") == "cat sat on mat"
    assert normalize("An apple-a-day") == "appleaday"  # punctuation goes first, as in SQuAD
    assert normalize("theatre") == "theatre"  # articles are whole words only


def test_exact_match_after_normalization():
    assert exact_match("The cat.", "cat") == 1.0
    assert exact_match("the dog", "cat") == 0.0
    assert exact_match("", "") == 1.0


def test_token_f1_known_overlaps():
    assert token_f1("x b c", "b c d") == pytest.approx(2 / 3)
    assert token_f1("a b c", "b c d") == pytest.approx(0.8)  # "a" is an article: {b c} vs {b c d}, P 1, R 2/3
    assert token_f1("red red blue", "red green") == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert token_f1("c b", "b c") == 1.0  # a bag: order does not matter
    assert token_f1("", "") == 1.0
    assert token_f1("", "cat") == 0.0 and token_f1("cat", "") == 0.0
    assert token_f1("dog", "cat") == 0.0


def test_rouge_l_uses_the_longest_common_subsequence():
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4  # the textbook example
    # normalized: "police killed gunman today" (4) vs "police kill gunman" (3); LCS "police gunman": P 2/4, R 2/3
    assert rouge_l("police killed the gunman today", "police kill the gunman") == pytest.approx(4 / 7)
    assert rouge_l("w x y z", "w q x r y") == pytest.approx(2 * (3 / 4) * (3 / 5) / (3 / 4 + 3 / 5))
    assert rouge_l("c b", "b c") == pytest.approx(0.5)  # order matters, unlike token F1
    assert rouge_l("", "") == 1.0 and rouge_l("", "x") == 0.0 and rouge_l("x", "y") == 0.0


def test_score_texts_means_each_score():
    scores = score_texts(["the colour is red", "blue", ""], ["colour is red", "red", "green"])
    assert scores == pytest.approx({"exact_match": 1 / 3, "token_f1": 1 / 3, "rouge_l": 1 / 3})
    with pytest.raises(ValueError, match="as many predictions"):
        score_texts(["a"], [])


def test_the_reference_is_the_last_labelled_span():
    # a chat: system/user prompt, assistant turn 1 (trained), user turn 2, assistant turn 2 (trained), end marker
    input_ids = [1, 2, 3, 10, 11, 4, 5, 20, 21, 22, 9]
    labels = [I, I, I, 10, 11, I, I, 20, 21, 22, I]
    assert last_response_span(labels) == (7, 10)
    pair = split_row(input_ids, labels)
    assert pair.prompt_ids == [1, 2, 3, 10, 11, 4, 5] and pair.reference_ids == [20, 21, 22]
    assert last_response_span([I, I, 7, 8]) == (2, 4)
    assert last_response_span([I, I]) is None and split_row([1, 2], [I, I]) is None
    assert split_row([7, 8], [7, 8]) is None  # nothing to generate from


def test_prompts_and_references_keep_split_order_and_skip_unusable_rows():
    rows = [{"input_ids": [1, 2], "labels": [I, I]}, {"input_ids": [1, 5, 6], "labels": [I, 5, 6]},
            {"input_ids": [2, 7], "labels": [I, 7]}, {"input_ids": [3, 8], "labels": [I, 8]}]
    pairs = prompts_and_references(rows, 2)
    assert [p.reference_ids for p in pairs] == [[5, 6], [7]]


@pytest.fixture(scope="module")
def tiny_lm(tiny_causal_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(tiny_causal_lm), tokenizer


def test_generation_is_greedy_batched_like_one_by_one(tiny_lm):
    model, tokenizer = tiny_lm
    prompts = [p.prompt_ids for p in prompts_and_references(causal_lm_split(tokenizer, 6), 6)]
    assert len({len(p) for p in prompts}) > 1  # prompts of different lengths: left padding is exercised
    batched = generate_answers(model, tokenizer, prompts, max_new_tokens=6, batch_size=4)
    assert len(batched) == len(prompts) and all(isinstance(text, str) for text in batched)
    assert batched == generate_answers(model, tokenizer, prompts, max_new_tokens=6, batch_size=4)
    assert batched == [generate_answers(model, tokenizer, [p], max_new_tokens=6)[0] for p in prompts]


def test_score_generation_returns_scores_and_examples(tiny_lm):
    model, tokenizer = tiny_lm
    split = causal_lm_split(tokenizer, 12)
    scores, examples = score_generation(model, tokenizer, split, limit=5, max_new_tokens=4)
    assert set(scores) == {"exact_match", "token_f1", "rouge_l"} and all(0 <= v <= 1 for v in scores.values())
    assert len(examples) == 5
    assert examples[0]["prompt"] == "name the colour green number 0"  # the first rows, decoded without eos
    assert examples[0]["reference"] == "the colour is green"
    assert scores == pytest.approx(score_texts([e["generated"] for e in examples], [e["reference"] for e in examples]))
    assert score_generation(model, tokenizer, split, limit=0) == ({}, [])


def test_score_generation_keeps_prompts_within_the_context(tiny_lm, monkeypatch):
    """A prompt that fills the tiny GPT-2's 128 positions is cut from the left to leave room for the answer: the model
    is handed the prompt's last 108 tokens (128 less 20 new ones), and the generated tokens still fit."""
    model, tokenizer = tiny_lm
    prompt = list(range(5, 125)) + [7, 8]  # 122 tokens, the last two of them the reference
    row = {"input_ids": prompt, "labels": [I] * 120 + [7, 8]}
    handed: list[list[int]] = []
    generate = model.generate

    def recording(**kwargs):
        handed.extend(kwargs["input_ids"][kwargs["attention_mask"].bool()].view(1, -1).tolist())
        output = generate(**kwargs)
        assert output.shape[1] <= model.config.n_positions
        return output

    monkeypatch.setattr(model, "generate", recording)
    _, examples = score_generation(model, tokenizer, [row], limit=1, max_new_tokens=20)
    assert handed == [prompt[:120][-108:]], "the prompt (without its reference) cut from the left to 108 tokens"
    assert len(examples) == 1 and isinstance(examples[0]["generated"], str)


def test_decode_speed_times_a_fixed_number_of_greedy_tokens(tiny_causal_lm, monkeypatch):
    """Every variant writes exactly DECODE_TOKENS tokens from the same prompt (end-of-sequence held off), so the
    milliseconds per token compare across variants."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finesweep.trainer.serving.generate import DECODE_REPEATS, decode_speed
    from tests.exports import causal_lm_split

    import torch

    model = AutoModelForCausalLM.from_pretrained(tiny_causal_lm)
    split = causal_lm_split(AutoTokenizer.from_pretrained(tiny_causal_lm), 4)
    # The model's end-of-sequence becomes the very token greedy decoding writes first: only holding it off gives 12.
    prompt = [i for i, label in zip(split[0]["input_ids"], split[0]["labels"]) if label == -100]
    with torch.no_grad():
        model.generation_config.eos_token_id = int(model(torch.tensor([prompt])).logits[0, -1].argmax())
    lengths = []
    generate = model.generate

    def counted(**kwargs):
        output = generate(**kwargs)
        lengths.append(output.shape[1] - kwargs["input_ids"].shape[1])
        return output

    monkeypatch.setattr(model, "generate", counted)
    speed = decode_speed(model, split, new_tokens=12)
    assert speed["ms_per_generated_token"] > 0
    assert set(lengths) == {12} and 2 <= len(lengths) <= DECODE_REPEATS + 1  # a warm-up and timed runs
    assert decode_speed(model, [], new_tokens=12) == {}
