#!/usr/bin/env python3
"""DPO written out in plain PyTorch, in float64, from Rafailov et al. (2023) and the formulas TRL's
DPOTrainer documents: for each pair, the answers' log-probabilities under the policy (summed over
the answer's tokens; averaged over them for IPO) and under the reference give the margin
    delta = (chosen - rejected) - (ref_chosen - ref_rejected)
and the loss, averaged over the pairs:
    sigmoid: -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta)
    ipo:     (delta - 1 / (2 beta))^2
    hinge:   max(0, 1 - beta delta)
with the rewards beta (policy - reference) of each answer.

Two cases, each a folder of OUT_DIR, on the tiny llama3-gqa-rope shapes of tiny_llama_configs.py
and the plain-PyTorch Llama of llama_torch_reference.py:
  dpo-full/  policy/ and reference/ (two Hugging Face folders: the reference a perturbed copy of
             the policy), every policy parameter trained;
  dpo-lora/  base/ and adapter/ (a PEFT adapter folder whose B matrices are not zero): the policy is
             the base with the adapters, the reference the base alone, only the adapters trained.
Each holds pairs.safetensors (input_ids and labels (2P, T): the P chosen sequences, then the P
rejected ones, in pair order; labels -100 on prompts and padding), cases.json (each case's
loss_type, beta and label_smoothing) and <case>.safetensors: loss (), chosen_rewards and
rejected_rewards (P), policy_logps and reference_logps (2P, summed over each answer) and grad.<name>
of every trained parameter.

Usage: python3 tests/reference/dpo_reference.py OUT_DIR
"""
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F

from llama_torch_reference import forward, parameter_shapes, random_weights, save_folder
from safetensors_io import write_safetensors
from tiny_llama_configs import CONFIGS, SEED

PAIRS, TOKENS = 12, 16
CASES = {
    "sigmoid": dict(loss_type="sigmoid", beta=0.1, label_smoothing=0.0),
    "smoothed": dict(loss_type="sigmoid", beta=0.5, label_smoothing=0.2),
    "ipo": dict(loss_type="ipo", beta=0.1, label_smoothing=0.0),
    "hinge": dict(loss_type="hinge", beta=0.5, label_smoothing=0.0),
}


def pairs(vocab_size):
    """P pairs of one prompt and two answers of their own lengths, padded with 0 to TOKENS."""
    g = torch.Generator().manual_seed(SEED + 7)
    ids = torch.zeros(2 * PAIRS, TOKENS, dtype=torch.int64)
    labels = torch.full((2 * PAIRS, TOKENS), -100, dtype=torch.int64)
    for i in range(PAIRS):
        prompt = int(torch.randint(2, 7, (1,), generator=g))
        prompt_ids = torch.randint(3, vocab_size, (prompt,), generator=g)
        for row in (i, PAIRS + i):
            answer = int(torch.randint(2, TOKENS - prompt + 1, (1,), generator=g))
            answer_ids = torch.randint(3, vocab_size, (answer,), generator=g)
            ids[row, :prompt] = prompt_ids
            ids[row, prompt:prompt + answer] = answer_ids
            labels[row, prompt:prompt + answer] = answer_ids
    return ids, labels


def answer_logps(logits, labels, average):
    """Each row's summed (or averaged) log-probability of its labelled tokens, token t+1 from t."""
    shifted = labels[:, 1:]
    mask = shifted != -100
    per_token = torch.gather(F.log_softmax(logits[:, :-1], -1), 2, shifted.clamp(min=0)[:, :, None])[:, :, 0]
    sums = (per_token * mask).sum(1)
    return sums / mask.sum(1) if average else sums


def dpo(policy, reference, case):
    p = policy.shape[0] // 2
    beta, eps = case["beta"], case["label_smoothing"]
    delta = (policy[:p] - policy[p:]) - (reference[:p] - reference[p:])
    if case["loss_type"] == "sigmoid":
        losses = -F.logsigmoid(beta * delta) * (1 - eps) - F.logsigmoid(-beta * delta) * eps
    elif case["loss_type"] == "ipo":
        losses = (delta - 1 / (2 * beta)) ** 2
    else:
        losses = torch.relu(1 - beta * delta)
    return losses.mean(), beta * (policy[:p] - reference[:p]).detach(), beta * (policy[p:] - reference[p:]).detach()


def write_case(folder, name, case, policy_weights, reference_weights, trained, ids, labels, lora_scale=None):
    exact = {n: t.double() for n, t in policy_weights.items()}
    exact.update({n: exact[n].requires_grad_(True) for n in trained})
    positions = torch.arange(TOKENS).expand_as(ids)
    average = case["loss_type"] == "ipo"
    with torch.no_grad():
        ref_logits = forward(CFG, {n: t.double() for n, t in reference_weights.items()}, ids, positions)
    policy = answer_logps(forward(CFG, exact, ids, positions, lora_scale), labels, average)
    reference = answer_logps(ref_logits, labels, average)
    loss, chosen_rewards, rejected_rewards = dpo(policy, reference, case)
    loss.backward()
    tensors = {"loss": loss.detach().float().reshape(()), "chosen_rewards": chosen_rewards.float(),
               "rejected_rewards": rejected_rewards.float(),
               "policy_logps": answer_logps(forward(CFG, {n: t.detach() for n, t in exact.items()}, ids, positions,
                                                    lora_scale), labels, False).detach().float(),
               "reference_logps": answer_logps(ref_logits, labels, False).float()}
    tensors.update({"grad." + n: exact[n].grad.float() for n in trained})
    write_safetensors(os.path.join(folder, name + ".safetensors"), tensors)
    accuracy = (chosen_rewards > rejected_rewards).double().mean().item()
    print(f"{folder} {name}: loss {loss.item():.6f}, accuracy {accuracy:.3f}")


CFG = CONFIGS["llama3-gqa-rope"]


def make_full(folder):
    g = torch.Generator().manual_seed(SEED + 11)
    policy = random_weights(CFG, g, torch.float32)
    # The reference: the policy moved a little, as the weights a DPO run starts from and the policy it trains.
    reference = {n: t + 0.02 * t.abs().mean() * torch.randn(t.shape, generator=g) for n, t in policy.items()}
    save_folder(os.path.join(folder, "policy"), CFG, policy, 1, "float32")
    save_folder(os.path.join(folder, "reference"), CFG, reference, 1, "float32")
    ids, labels = pairs(CFG["vocab_size"])
    write_safetensors(os.path.join(folder, "pairs.safetensors"), {"input_ids": ids, "labels": labels})
    for name, case in CASES.items():
        write_case(folder, name, case, policy, reference, list(policy), ids, labels)


def make_lora(folder, r=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj", "lm_head")):
    g = torch.Generator().manual_seed(SEED + 13)
    base = random_weights(CFG, g, torch.float32)
    save_folder(os.path.join(folder, "base"), CFG, base, 1, "float32")
    shapes = parameter_shapes(CFG)
    adapters = {}
    for name, shape in shapes.items():  # the config's head is untied: lm_head.weight is among them
        parts = name.split(".")
        if len(shape) != 2 or parts[-2] not in targets:
            continue
        out, inp = shape
        stem = name[:-len("weight")]
        adapters[stem + "lora_A.weight"] = 0.1 * torch.randn((r, inp), generator=g)
        adapters[stem + "lora_B.weight"] = 0.1 * torch.randn((out, r), generator=g)
    os.makedirs(os.path.join(folder, "adapter"))
    write_safetensors(os.path.join(folder, "adapter", "adapter_model.safetensors"),
                      {"base_model.model." + n: t for n, t in adapters.items()})
    with open(os.path.join(folder, "adapter", "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "base", "r": r,
                   "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": list(targets), "bias": "none",
                   "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "use_rslora": False,
                   "use_dora": False, "modules_to_save": None}, f, indent=2)
    ids, labels = pairs(CFG["vocab_size"])
    write_safetensors(os.path.join(folder, "pairs.safetensors"), {"input_ids": ids, "labels": labels})
    policy = dict(base, **adapters)
    for name, case in CASES.items():
        write_case(folder, name, case, policy, base, list(adapters), ids, labels, lora_scale=alpha / r)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    for name, make in (("dpo-full", make_full), ("dpo-lora", make_lora)):
        folder = os.path.join(sys.argv[1], name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        make(folder)
        with open(os.path.join(folder, "cases.json"), "w") as f:
            json.dump(CASES, f, indent=2)


if __name__ == "__main__":
    main()
