"""`gold_logprobs`: batched, teacher-forced mean log-prob of a gold answer (IGPO's likelihood)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from creditline.credit.gold_answer import gold_logprobs


def encode_prompt(tokenizer, text: str) -> list[int]:
    return [tokenizer.bos_token_id, *tokenizer.encode(text, add_special_tokens=False)]


def per_row_loop(model, tokenizer, prompts, answers) -> np.ndarray:
    """The plain reference: one unpadded forward per row, the full-vocabulary log-softmax, a gather."""
    means = []
    for prompt, text in zip(prompts, answers, strict=True):
        answer = tokenizer.encode(text, add_special_tokens=False)
        ids = torch.tensor([[*prompt, *answer]])
        with torch.no_grad():
            logp_all = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)  # (L, V)
        logps = [logp_all[len(prompt) - 1 + j, token].item() for j, token in enumerate(answer)]
        means.append(sum(logps) / len(logps))
    return np.array(means)


ROWS = [  # (prompt text, gold answer): prompts of different lengths, answers of one to three tokens
    ("key", "7"),
    ("key up no left 7 down no", "7"),
    ("1 2 + 7 =", "1 9"),
    ("key left no", "up 4 5"),
    ("go key right 3 up 2 last none", "right"),
]


def test_batched_equals_a_per_row_loop(tiny_policy):
    model, tokenizer = tiny_policy
    prompts = [encode_prompt(tokenizer, text) for text, _ in ROWS]
    answers = [answer for _, answer in ROWS]
    expected = per_row_loop(model, tokenizer, prompts, answers)
    for token_budget in (1, 20, 16_384):  # one row a pass, a few rows a pass (right-padded), all at once
        got = gold_logprobs(model, tokenizer, prompts, answers, token_budget=token_budget)
        assert got.dtype == np.float64 and got.shape == (len(ROWS),)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert np.all(expected < 0)


def test_tiny_policy_by_hand_one_prefix_at_a_time(tiny_policy):
    """ℓ = (log π(1 | p) + log π(9 | p, 1)) / 2, each term from its own forward over the prefix."""
    model, tokenizer = tiny_policy
    prompt = encode_prompt(tokenizer, "1 2 + 7 =")
    one, nine = tokenizer.convert_tokens_to_ids(["1", "9"])
    with torch.no_grad():
        first = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)[one]
        second = torch.log_softmax(model(input_ids=torch.tensor([[*prompt, one]])).logits[0, -1], -1)[nine]
    by_hand = (first.item() + second.item()) / 2
    (got,) = gold_logprobs(model, tokenizer, [prompt], ["1 9"])
    assert got == pytest.approx(by_hand, abs=1e-6)


class Bigram(torch.nn.Module):
    """A model whose next-token distribution depends on the current token only: logits = log P[token]."""

    def __init__(self, probabilities: list[list[float]]):
        super().__init__()
        self.log_table = torch.nn.Parameter(torch.tensor(probabilities).log())

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(logits=self.log_table[input_ids])  # (R, L, V)


class WordTokenizer:
    pad_token_id = None

    def __init__(self, words: list[str]):
        self.ids = {word: i for i, word in enumerate(words)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.ids[word] for word in text.split()]


def test_hand_computed_on_a_bigram_model():
    # P(next | a) = (.5, .25, .25), P(next | b) = (.1, .6, .3), P(next | c) = (.2, .2, .6)
    model = Bigram([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    tokenizer = WordTokenizer(["a", "b", "c"])
    got = gold_logprobs(model, tokenizer, [[0], [2, 2, 0], [1]], ["b c", "a", "c c c"], token_budget=8)
    expected = [
        (math.log(0.25) + math.log(0.3)) / 2,  # a → b → c
        math.log(0.5),  # … a → a
        (math.log(0.3) + 2 * math.log(0.6)) / 3,  # b → c → c → c
    ]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_an_answer_of_no_tokens_or_an_empty_prompt_is_refused_naming_the_row():
    model, tokenizer = Bigram([[0.5, 0.5], [0.5, 0.5]]), WordTokenizer(["a", "b"])
    with pytest.raises(ValueError, match=r"row 1: the gold answer '' tokenises to no tokens"):
        gold_logprobs(model, tokenizer, [[0], [1]], ["a", ""])
    with pytest.raises(ValueError, match=r"row 0: the gold answer '  ' tokenises to no tokens"):
        gold_logprobs(model, tokenizer, [[0]], ["  "])
    with pytest.raises(ValueError, match="row 0: the prompt is empty"):
        gold_logprobs(model, tokenizer, [[]], ["a"])
    with pytest.raises(ValueError, match="2 prompts but 1 answers"):
        gold_logprobs(model, tokenizer, [[0], [1]], ["a"])
    assert gold_logprobs(model, tokenizer, [], []).shape == (0,)


def test_the_model_comes_back_in_the_mode_it_was_in(tiny_policy):
    model, tokenizer = tiny_policy
    prompt = encode_prompt(tokenizer, "key")
    model.train()
    in_train = gold_logprobs(model, tokenizer, [prompt], ["up"])
    assert model.training
    model.eval()
    assert gold_logprobs(model, tokenizer, [prompt], ["up"]) == pytest.approx(in_train, abs=0)
    assert not model.training
