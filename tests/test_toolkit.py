"""The training toolkit's single definitions: which parameters decay, the decay term, the optimiser, the schedule.

Each former place had its own expression of these; the toolkit's must give exactly what each of them
gave (the same names, the same bits), and no module of the learners may write its own again.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from coalitions.learners.training.decay import decay_gradient, decay_penalty, decayed_names, with_decay  # noqa: E402
from coalitions.learners.training.engine import Adam, make_optimizer  # noqa: E402
from coalitions.learners.training.models import make_model, personal_init  # noqa: E402
from coalitions.learners.training.protocol import lr_factor, make_schedule  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SPECS = [make_model("linear", (5,), 1), make_model("logistic", (5,), 3), make_model("mlp", (5,), 2, hidden=4),
         make_model("cnn", (1, 8, 8), 3, channels=(2, 3))]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_the_decayed_parameters_are_every_former_places_weights(spec):
    names = decayed_names(spec.shapes)
    # the round engine, the federated game and SPO: rank of the per-model shape
    assert names == tuple(k for k, s in spec.shapes.items() if len(s) >= 2)
    assert names == tuple(k for k, s in spec.shapes.items() if len(s) > 1)
    # the shared-head subset trainer: the rank of the unstacked initial tensors
    init = {k: v[0] for k, v in spec.init(torch.Generator().manual_seed(0), 1).items()}
    assert decayed_names({k: v.shape for k, v in init.items()}) == tuple(k for k, v in init.items() if v.dim() >= 2)
    # the personal-head subset trainer: the body's weights, and the heads' with their client axis
    heads = personal_init(spec, init, 3)
    assert decayed_names({k: heads[k].shape for k in spec.body}) == tuple(k for k in spec.body if heads[k].dim() >= 2)
    assert (decayed_names({k: heads[k].shape for k in spec.head}, stacked=1)
            == tuple(k for k in spec.head if heads[k].dim() >= 3))
    assert not any(k.startswith("b") and len(spec.shapes[k]) == 1 for k in names)   # no bias decays


def test_the_penalty_is_the_former_expressions_bit_for_bit():
    gen = torch.Generator().manual_seed(2)
    spec = SPECS[2]
    one = {k: torch.randn(s, generator=gen) for k, s in spec.shapes.items()}
    stacked = {k: torch.randn((6, *s), generator=gen) for k, s in spec.shapes.items()}
    names = decayed_names(spec.shapes)
    wd = 1e-3
    # the round engine's former `decayed` (one model) and SPO's per-direction penalty (stacked)
    assert torch.equal(decay_penalty(one, names, wd), 0.5 * wd * sum((one[k] ** 2).sum() for k in names))
    assert torch.equal(decay_penalty(stacked, names, wd, stacked=1),
                       0.5 * wd * sum((v ** 2).flatten(1).sum(1) for k, v in stacked.items() if k in names))
    assert decay_penalty(one, names, 0.0) == 0.0 and decay_penalty(one, (), wd) == 0.0
    assert torch.equal(decay_penalty(one, (*names, "absent"), wd), decay_penalty(one, names, wd))


def test_the_gradient_form_is_the_penaltys_derivative_and_the_former_updates():
    gen = torch.Generator().manual_seed(3)
    spec = SPECS[2]
    params = {k: torch.randn((4, *s), generator=gen, requires_grad=True) for k, s in spec.shapes.items()}
    names = decayed_names(spec.shapes)
    wd = 1e-2
    auto = torch.autograd.grad(decay_penalty(params, names, wd, stacked=1).sum(), [params[k] for k in names])
    got = decay_gradient(params, names, wd)
    assert all(torch.equal(got[k], g) for k, g in zip(names, auto, strict=True))
    grads = {k: torch.randn(v.shape, generator=gen) for k, v in params.items()}
    added = with_decay(grads, got)
    # FedeRiCo's M-step, the federated game's sites and the engine's optimisers wrote `g + wd·p` on the weights
    for k, v in params.items():
        expect = grads[k] + wd * v.detach() if k in names else grads[k]
        assert torch.equal(added[k], expect), k
    assert decay_gradient(params, names, 0.0) == {} and with_decay(grads, {}) == grads


def test_the_optimisers_never_decay():
    for opt in (make_optimizer("sgd", 0.1, 0.9), make_optimizer("adam", 0.1)):
        assert not hasattr(opt, "weight_decay")
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert all(g["weight_decay"] == 0 for g in make_optimizer("adam", 0.1, params=p, fused=True).param_groups)
    assert isinstance(make_optimizer("adam", 0.1), Adam)
    assert isinstance(make_optimizer("sgd", 0.1, 0.5, params=p), torch.optim.SGD)


@pytest.mark.parametrize("steps", [1, 3, 12, 100, 1000])
def test_spos_floor_is_a_setting_of_the_one_schedule(steps):
    """SPO's former rate law, ``0.01 + 0.99·½(1 + cos(π·t/T))``, and the plain cosine, to the bit."""
    p = [torch.nn.Parameter(torch.zeros(1))]
    opt = make_optimizer("adam", 0.02, params=p)
    sched = make_schedule(opt, "cosine", steps, floor=0.01)
    for t in range(steps + 3):
        former = 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * min(t, steps) / max(steps, 1)))
        assert lr_factor("cosine", t, steps, 0.01) == former
        assert lr_factor("cosine", t, steps) == 0.5 * (1.0 + math.cos(math.pi * min(t, steps) / max(steps, 1)))
        assert opt.param_groups[0]["lr"] == 0.02 * former
        opt.step()
        sched.step()


def test_the_recursive_cosine_is_pytorchs():
    p, q = [torch.nn.Parameter(torch.zeros(1))], [torch.nn.Parameter(torch.zeros(1))]
    a, b = make_optimizer("adam", 0.02, params=p), torch.optim.Adam(q, lr=0.02)
    sa, sb = make_schedule(a, "cosine", 12, recursive=True), torch.optim.lr_scheduler.CosineAnnealingLR(b, T_max=12)
    for _ in range(15):
        assert a.param_groups[0]["lr"] == b.param_groups[0]["lr"]
        a.step(), b.step(), sa.step(), sb.step()
    with pytest.raises(Exception, match="recursive"):
        make_schedule(a, "cosine", 12, floor=0.01, recursive=True)


#: Expressions each idea used to be written with, outside the toolkit's modules.
FORMER = {
    "which parameters decay": r"len\((s|shape)\) (>=|>) [12]|dim\(\) >= 3",
    "the decay penalty": r"0\.5 \* (self\.)?(l2_?|weight_decay|wd)\b",
    "the decay gradient": r"(weight_decay|decay|wd|l2)\)? ?\* ?(p\b|phi\[|v\.detach)|torch\.mul\(params",
    "an optimiser": r"torch\.optim\.(Adam|SGD)\(|[^_a-zA-Z.](Adam|SGD)\((float|lr)",
    "a schedule": r"lr_scheduler\.|math\.cos\(math\.pi",
}
TOOLKIT = {"learners/training/decay.py", "learners/training/engine.py", "learners/training/protocol.py",
           "learners/training/threads.py"}   # threads.py counts the weights' size for its thread rule


@pytest.mark.parametrize("idea", sorted(FORMER))
def test_no_learner_module_writes_its_own(idea):
    pattern = re.compile(FORMER[idea])
    found = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "learners").rglob("*.py"))
             if str(path.relative_to(ROOT)) not in TOOLKIT
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == [], f"{idea} written outside the toolkit: {found}"


def test_one_subset_training_loop_for_both_heads():
    """The shared and personal heads are objectives of one loop (game/stepper.py), not two loops."""
    from coalitions.learners.game import personal, shared, stepper

    loops = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "learners").rglob("*.py"))
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "SubsetStepper(params" in line]
    assert len(loops) == 1 and loops[0].startswith("learners/game/stepper.py:"), loops
    for head in (shared.SharedHead, personal.PersonalHeads):
        assert all(callable(getattr(head, name)) for name in ("rows", "decay", "__call__"))
    assert stepper.train_stacked.__module__ == "coalitions.learners.game.stepper"
