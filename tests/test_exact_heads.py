"""Personal heads (FedPer's split): the exhaustive oracle (one body per subset, one output layer per member)
and SPO (the hypernetwork generates the body, each client owns its head)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from learner_fixtures import blobs, regression  # noqa: E402

from coalitions import cli  # noqa: E402
from coalitions.bitmask import members  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.metrics import evaluate_batch  # noqa: E402
from coalitions.learners.exact import (  # noqa: E402
    ExhaustiveOracle,
    personal_from_singletons,
    train_subsets_personal,
)
from coalitions.learners.training.models import (  # noqa: E402
    make_model,
    member_personal_outputs,
    personal_init,
    product_major,
    stack_init,
    stacked_personal_forward,
)
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

#: Linear regression solved in closed form with a tiny ridge (the default protocol of a regression task).
LINEAR = TrainingProtocol(model="linear", closed_form=True, weight_decay=1e-10)


def stacked_data(fed, dtype=torch.float64):
    X = torch.tensor(np.concatenate([c.train.X for c in fed.clients]), dtype=dtype)
    y = torch.tensor(np.concatenate([c.train.y for c in fed.clients]))
    owner = torch.repeat_interleave(torch.arange(fed.n), torch.tensor(fed.sizes("train")))
    return X, y, owner


def first_init(spec, n, seed=0, dtype=torch.float64):
    init = {k: v[0] for k, v in spec.init(torch.Generator().manual_seed(seed), 1, dtype=dtype).items()}
    return personal_init(spec, init, n)


def test_personal_forward_uses_each_clients_own_head():
    spec = make_model("mlp", (5,), 3, hidden=4)
    M, counts = 2, [3, 0, 2]
    params = {k: v for k, v in spec.init(torch.Generator().manual_seed(1), M, dtype=torch.float64).items()}
    params["w2"] = torch.randn(M, 3, 4, 3, dtype=torch.float64)
    params["b2"] = torch.randn(M, 3, 3, dtype=torch.float64)
    X = torch.randn(5, 5, dtype=torch.float64)
    out = stacked_personal_forward(spec, params, X, counts)
    owner = [0, 0, 0, 2, 2]
    for m in range(M):
        for s, i in enumerate(owner):
            one = {"w1": params["w1"][m], "b1": params["b1"][m], "w2": params["w2"][m, i], "b2": params["b2"][m, i]}
            assert torch.allclose(out[m, s], spec.forward(one, X[s:s + 1])[0])


@pytest.mark.parametrize("kind", ["mlp", "logistic"])
def test_member_outputs_are_the_stacked_forwards_member_rows(kind):
    # the exact game's validation (learners/game/chunks.py) computes only each client's member models; its
    # patience must read the values the whole stack gives (BLAS may round a block of fewer rows differently
    # in the last bit, so to float32 rounding; on Fashion-MNIST's shapes they were the same bits)
    spec = make_model(kind, (6,), 3, hidden=5)
    counts = [4, 0, 3, 5]
    N, M = len(counts), 7
    gen = torch.Generator().manual_seed(2)
    init = personal_init(spec, {k: v[0] for k, v in spec.init(gen, 1).items()}, N)
    params = stack_init(init, M, product_major(spec))
    with torch.no_grad():
        for v in params.values():
            v.add_(torch.randn(v.shape, generator=gen) * 0.3)
    X = torch.randn(sum(counts), 6, generator=gen)
    member = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0], [0, 1, 0, 0],
                           [1, 0, 0, 0], [0, 0, 1, 0], [1, 1, 1, 0]])           # client 3 in no model
    members = [torch.nonzero(member[:, i])[:, 0] for i in range(N)]
    full = stacked_personal_forward(spec, params, X, counts)
    got = member_personal_outputs(spec, params, X, counts, members)
    lo = np.concatenate([[0], np.cumsum(counts)])
    for i in range(N):
        if not len(members[i]) or not counts[i]:
            assert got[i] is None
            continue
        torch.testing.assert_close(got[i], full[members[i], lo[i]:lo[i + 1]], rtol=1e-6, atol=1e-6)
    assert got[1] is None and got[3] is None


def test_bodyless_model_gives_every_member_its_value_alone():
    """Affine: the whole model is the head, so a member of S trains on its own data only: v_i(S) = v_i({i})."""
    fed = blobs(sizes=(14, 10, 12), dim=4, classes=3)
    o = ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=60, lr=0.05, weight_decay=1e-3),
                         dtype="float64", heads="personal", device="cpu", seed=3).fit(fed)
    X, y, owner = stacked_data(fed)
    spec = make_model("logistic", fed.input_shape, fed.n_outputs)
    p = train_subsets_personal(spec, fed.task, X, y, owner, list(range(1, 8)), 3, first_init(spec, 3, 3),
                               epochs=60, lr=0.05, l2=1e-3)
    for mask in range(1, 8):
        for i in members(mask):
            alone = 1 << i
            # the head of i in S and in {i}: the same problem up to a constant factor in the loss (Adam is
            # invariant to it but for its epsilon)
            assert torch.allclose(p["weight"][mask - 1, i], p["weight"][alone - 1, i], atol=1e-4)
            assert o.values_val_[i, mask] == o.values_val_[i, alone]
            assert o.values_test_[i, mask] == o.values_test_[i, alone]
    assert o.config_["heads"] == "personal" and "heads" not in ExhaustiveOracle(protocol=o.protocol).config(fed)


def test_closed_form_personal_heads_are_everyone_alone():
    fed = regression()
    shared = ExhaustiveOracle(protocol=LINEAR, replicates=5).fit(fed)
    personal = ExhaustiveOracle(protocol=LINEAR, heads="personal", replicates=5).fit(fed)
    assert personal.method_ == shared.method_ == "closed-form"
    for i in range(fed.n):
        for mask in range(1, 8):
            expect = shared.values_val_[i, 1 << i] if mask >> i & 1 else np.nan
            assert np.array_equal(personal.values_val_[i, mask], expect, equal_nan=True)
    reps = personal.replicates_.values                       # (B, N, 2^N)
    assert np.array_equal(reps[:, 0, 0b011], reps[:, 0, 0b001]) and np.array_equal(reps[:, 2, 0b111], reps[:, 2, 0b100])
    assert not np.array_equal(reps[:, 0, 0b001], shared.replicates_.values[:, 0, 0b011])  # shared: other models
    v = np.arange(8.0).reshape(1, 2, 4)
    out = personal_from_singletons(v)
    assert np.array_equal(out[0, 0], [np.nan, 1, np.nan, 1], equal_nan=True)
    assert np.array_equal(out[0, 1], [np.nan, np.nan, 6, 6], equal_nan=True)


def test_a_non_members_head_never_moves_and_a_members_does():
    fed = blobs(sizes=(9, 11, 8), dim=4, classes=3)
    X, y, owner = stacked_data(fed)
    spec = make_model("mlp", fed.input_shape, fed.n_outputs, hidden=5)
    init = first_init(spec, 3)
    masks = [0b011, 0b101, 0b110, 0b001]
    p = train_subsets_personal(spec, fed.task, X, y, owner, masks, 3, init, epochs=20, lr=0.05, l2=1e-2,
                               batch_size=7)
    for k, mask in enumerate(masks):
        for i in range(3):
            moved = not torch.equal(p["w2"][k, i], init["w2"][i]) or not torch.equal(p["b2"][k, i], init["b2"][i])
            assert moved == bool(mask >> i & 1), (mask, i)
        assert not torch.equal(p["w1"][k], init["w1"])


def test_singleton_personal_model_is_the_clients_own_model():
    """{i} with personal heads is the ordinary model trained on i alone (same start, same batches)."""
    fed = blobs(sizes=(9, 11, 8), dim=4, classes=3)
    kw = dict(protocol=TrainingProtocol(model="mlp", hidden=5, steps=25, lr=0.05), dtype="float64", device="cpu",
              seed=4)
    shared = ExhaustiveOracle(**kw).fit(fed).values_val_
    personal = ExhaustiveOracle(heads="personal", **kw).fit(fed).values_val_
    for i in range(3):
        assert personal[i, 1 << i] == pytest.approx(shared[i, 1 << i], abs=1e-12)


def reference_subset(fed, spec, init, mask, epochs, lr, l2):
    """One subset trained alone with a plain loop: one body, an nn head per member, full batch.

    The body descends the pooled loss ``Σ_i (n_i/n_S) L_i`` plus its decay, each head its own
    client's loss ``L_i`` plus its decay (two gradients, one Adam step).
    """
    body = {k: init[k].clone().requires_grad_(True) for k in spec.body}
    heads = {i: {k: init[k][i].clone().requires_grad_(True) for k in spec.head} for i in members(mask)}
    opt = torch.optim.Adam(list(body.values()) + [t for h in heads.values() for t in h.values()], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    n_s = sum(len(fed.clients[i].train) for i in heads)
    for _ in range(epochs):
        pooled = 0.5 * l2 * sum(body[k].pow(2).sum() for k in spec.body if body[k].dim() >= 2)
        own = {}
        for i, h in heads.items():
            c = fed.clients[i].train
            out = spec.forward({**body, **h}, torch.tensor(c.X, dtype=torch.float64))
            own[i] = torch.nn.functional.cross_entropy(out, torch.tensor(c.y))
            pooled = pooled + len(c) / n_s * own[i]
        opt.zero_grad()
        for k, g in zip(body, torch.autograd.grad(pooled, list(body.values()), retain_graph=True), strict=True):
            body[k].grad = g
        for i, h in heads.items():
            head_loss = own[i] + 0.5 * l2 * sum(v.pow(2).sum() for v in h.values() if v.dim() >= 2)
            for k, g in zip(h, torch.autograd.grad(head_loss, list(h.values()), retain_graph=True), strict=True):
                h[k].grad = g
        opt.step()
        sched.step()
    return {i: {**{k: v.detach() for k, v in body.items()}, **{k: v.detach() for k, v in h.items()}}
            for i, h in heads.items()}


def test_batched_personal_game_equals_each_subset_trained_alone():
    fed = blobs(sizes=(10, 12, 9), dim=4, classes=3, seed=2)
    spec = make_model("mlp", fed.input_shape, fed.n_outputs, hidden=6)
    kw = dict(epochs=40, lr=0.03, l2=1e-3)
    p = TrainingProtocol(model="mlp", hidden=6, steps=kw["epochs"], lr=kw["lr"], weight_decay=kw["l2"])  # full batch
    o = ExhaustiveOracle(protocol=p, dtype="float64", seed=5, heads="personal", chunk_size=3, device="cpu").fit(fed)
    init = first_init(spec, 3, seed=5)
    for mask in range(1, 8):
        ref = reference_subset(fed, spec, init, mask, **kw)
        for i, p in ref.items():
            Xv = torch.tensor(fed.clients[i].val.X, dtype=torch.float64)
            expect = evaluate_batch(fed.metric, fed.clients[i].val.y, spec.forward(p, Xv).numpy()[None])[0]
            assert o.values_val_[i, mask] == pytest.approx(expect, abs=1e-12)
        # and the parameters themselves
        X, y, owner = stacked_data(fed)
        got = train_subsets_personal(spec, fed.task, X, y, owner, [mask], 3, init, **kw)
        for i, p in ref.items():
            assert torch.allclose(got["w1"][0], p["w1"], atol=1e-8)
            assert torch.allclose(got["w2"][0, i], p["w2"], atol=1e-8)


def test_chunking_and_resume_give_the_same_personal_game(tmp_path):
    fed = blobs(sizes=(9, 11, 8), dim=4, classes=3)
    kw = dict(protocol=TrainingProtocol(model="mlp", hidden=4, steps=12, lr=0.05), seed=1, device="cpu",
              heads="personal", replicates=4)
    whole = ExhaustiveOracle(chunk_size=7, **kw).fit(fed)
    ckpt = tmp_path / "run.ckpt.npz"

    def stop_after_two_chunks(done, total):
        if done >= 2 * 2 * 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ExhaustiveOracle(chunk_size=2, checkpoint=ckpt, progress=stop_after_two_chunks, **kw).fit(fed)
    resumed = ExhaustiveOracle(chunk_size=2, checkpoint=ckpt, **kw).fit(fed)
    assert resumed.chunks_resumed_ == 1 and resumed.chunks_trained_ == 3
    for a, b in ((resumed.values_val_, whole.values_val_), (resumed.values_test_, whole.values_test_)):
        assert np.allclose(a, b, equal_nan=True, atol=1e-6)
    # a shared-head checkpoint is a different run
    with pytest.raises(InputError, match="different run"):
        ExhaustiveOracle(chunk_size=2, checkpoint=ckpt, **{**kw, "heads": "shared"}).fit(fed)


def test_bad_heads_value_names_the_parameter():
    with pytest.raises(InputError, match="heads"):
        ExhaustiveOracle(heads="mine").fit(blobs())


def test_cli_oracle_heads_flag(tmp_path, capsys):
    out = tmp_path / "g.json"
    rc = cli.main(["oracle", "digits", "--clients", "3", "--samples", "40", "--model", "mlp", "--mlp-hidden", "4",
                   "--steps", "2", "--heads", "personal", "--threads", "1", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0 and out.exists() and "personal heads" in err, err
    from coalitions.io import read_json

    assert read_json(out)["provenance"]["model"]["heads"] == "personal"
    rc = cli.main(["oracle", "digits", "--clients", "3", "--heads", "both", "-o", str(tmp_path / "h.json")])
    assert rc == 2 and "--heads" in capsys.readouterr().err


# ---------------------------------------------------------------------------- SPO with personal heads
def spo_setup(fed, **kw):
    """A fitted SPO with personal heads whose hypernetwork is put back at its initialisation (drawn from the seed)."""
    from coalitions.learners.methods.spo import SPO
    from coalitions.learners.training.protocol import TrainingProtocol

    est = SPO(model="mlp", heads="personal", target_hidden=5, protocol=TrainingProtocol(steps=1), hidden=8, embed=4,
              layers=1, directions=6, search_steps=2, device="cpu", seed=1, **kw).fit(fed)
    est.hypernet_ = est._new_hypernet(fed)   # untrained: a protocol's budget is at least one step
    for p in est.hypernet_.parameters():
        p.requires_grad_(True)
    return est


def head_grads(est, D, y_override=None):
    X, y, m = est.train_.X, est.train_.y.clone(), est.train_.m
    if y_override is not None:
        y = y_override
    est.hypernet_.zero_grad(set_to_none=True)
    body = est.hypernet_(D)
    f, _ = est._personal_objective(D, body, X, y, m)
    (torch.log(f).mean() if est.log_loss else f.mean()).backward()   # what SPO._train minimises
    return {k: v.grad.clone() for k, v in est.hypernet_.client_heads.items()}


@pytest.mark.parametrize("log_loss", [True, False])
def test_spo_head_learns_from_its_own_clients_loss_only(log_loss):
    fed = blobs(sizes=(9, 11, 8), dim=4, classes=3)
    est = spo_setup(fed, log_loss=log_loss)
    D = torch.tensor(np.random.default_rng(0).dirichlet(np.ones(3), size=6), dtype=torch.float32)
    g = head_grads(est, D)
    # scramble client 1's labels: client 0's and 2's heads get the very same gradient, client 1's another
    y = est.train_.y.clone()
    y[1] = (y[1] + 1) % 3
    g2 = head_grads(est, D, y)
    for k in g:
        for j in (0, 2):
            assert torch.allclose(g[k][j], g2[k][j], rtol=1e-5, atol=1e-7), (k, j)
        assert not torch.allclose(g[k][1], g2[k][1])
    # ... and head 0's gradient is that of mean_b d_b0 (L_0 + l2/2 ||W_0||^2) alone
    heads = {k: v.detach().clone().requires_grad_(True) for k, v in est.hypernet_.client_heads.items()}
    with torch.no_grad():
        body = est.hypernet_(D)
    X, yy, m = est.train_.X, est.train_.y, est.train_.m
    own = []
    for b in range(len(D)):
        p = {**{k: v[b] for k, v in body.items()}, "w2": heads["w2"][0], "b2": heads["b2"][0]}
        per = est.loss_(est.spec_.forward(p, X[0]), yy[0])
        own.append(D[b, 0] * ((per * m[0]).sum() / m[0].sum() + 0.5 * est.l2_ * heads["w2"][0].pow(2).sum()))
    torch.stack(own).mean().backward()
    assert torch.allclose(g["w2"][0], heads["w2"].grad[0], rtol=1e-4, atol=1e-7)
    assert torch.allclose(g["b2"][0], heads["b2"].grad[0], rtol=1e-4, atol=1e-7)


def test_spo_head_off_the_face_gets_no_gradient_and_never_moves():
    fed = blobs(sizes=(9, 11, 8), dim=4, classes=3)
    est = spo_setup(fed)
    D = torch.tensor([[0.3, 0.7, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    g = head_grads(est, D)
    assert all(torch.count_nonzero(v[2]) == 0 for v in g.values())
    assert all(torch.count_nonzero(v[0]) > 0 for v in g.values())
    # a whole training run on directions that never weigh client 2: its head stays at its start
    from coalitions.learners.methods.spo import SPO

    start = spo_setup(fed).hypernet_.client_heads["w2"][2].detach().clone()
    from coalitions.learners.training.protocol import TrainingProtocol

    trained = SPO(model="mlp", heads="personal", target_hidden=5, protocol=TrainingProtocol(steps=20), hidden=8,
                  embed=4, layers=1, directions=6, search_steps=2, device="cpu", seed=1)
    import coalitions.learners.methods.spo.estimator as estimator_module

    real = estimator_module.sample_directions

    def without_client_2(rng, n, k, alpha, faces):
        d = real(rng, n, k, alpha, faces)
        d[:, 2] = 0.0
        d[d.sum(1) == 0, 0] = 1.0
        return d / d.sum(1, keepdims=True)

    estimator_module.sample_directions = without_client_2
    try:
        trained.fit(fed)
    finally:
        estimator_module.sample_directions = real
    heads = trained.hypernet_.client_heads
    assert torch.equal(heads["w2"][2], start)
    assert not torch.equal(heads["w2"][0], start)


def test_spo_personal_heads_cnn_target_and_bad_combinations():
    from coalitions.learners.methods.spo import SPO
    from coalitions.params import ParameterError

    fed = blobs(sizes=(8, 9), dim=4, classes=3, image=True)
    from coalitions.learners.training.protocol import TrainingProtocol

    est = SPO(model="cnn", heads="personal", protocol=TrainingProtocol(steps=3), hidden=8, embed=4, layers=1,
              directions=4, search_steps=2, device="cpu").fit(fed)
    assert set(est.hypernet_.names) == {"c1", "cb1", "c2", "cb2"}
    assert est.hypernet_.client_heads["w"].shape[0] == 2
    assert set(est.utilities_["test"]) == {"0", "1"}
    # the outputs a report resamples are those of each client's own head at its direction
    outs = est.client_outputs("test")
    for c, o in zip(fed.clients, outs, strict=True):
        assert evaluate_batch(fed.metric, c.test.y, np.asarray(o)[None])[0] == est.utilities_["test"][c.name]
    assert est.estimate_.masks
    for bad in (dict(heads="personal"), dict(heads="personal", model="logistic"),
                dict(heads="personal", model="mlp", epo=True), dict(heads="mine", model="mlp")):
        with pytest.raises(ParameterError, match="heads"):
            SPO(protocol=TrainingProtocol(steps=1), **bad).fit(fed)


@pytest.mark.parametrize("model", ["mlp", "linear"])
def test_subset_outputs_are_the_personal_games_models(model):
    """The outputs a report re-trains for its statistics give back the game's own personal-head values."""
    fed = regression() if model == "linear" else blobs(sizes=(9, 11, 8), dim=4, classes=3)
    p = LINEAR if model == "linear" else TrainingProtocol(model="mlp", hidden=4, steps=10, lr=0.05)
    kw = dict(protocol=p, seed=2, device="cpu", heads="personal", dtype="float64")
    o = ExhaustiveOracle(**kw).fit(fed)
    masks = [0b001, 0b011, 0b110, 0b111]
    rows = ExhaustiveOracle(**kw).subset_outputs(fed, masks, "val")
    for k, mask in enumerate(masks):
        for i, c in enumerate(fed.clients):
            if not mask >> i & 1:
                assert rows[k][i] is None
                continue
            got = evaluate_batch(fed.metric, c.val.y, np.asarray(rows[k][i])[None])[0]
            assert got == pytest.approx(o.values_val_[i, mask], abs=1e-9)
