"""Shared fixtures: a tiny built-in policy folder, made once per test session."""

from __future__ import annotations

import pytest
import torch

from creditline.policy import TinyPolicyConfig, build_tiny_policy, load_policy

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory):
    return build_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny", TinyPolicyConfig(seed=0))


@pytest.fixture()
def tiny_policy(tiny_policy_dir):
    return load_policy(tiny_policy_dir)
