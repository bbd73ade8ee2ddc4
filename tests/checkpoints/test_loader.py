"""Loading checkpoints: the accepted layouts (a folder, the HF cache, shards, pytorch_model.bin)
and one clear line for every bad path and mismatch."""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import numpy as np
import pytest

from simlab.checkpoints import ARCHITECTURES, files, load, load_series
from simlab.errors import ConfigError

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints"


def copy(arch: str, dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(FIXTURES / arch, dest, ignore=shutil.ignore_patterns("oracle.npz"))
    return dest


def edit_config(folder: pathlib.Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def save_tensors(folder: pathlib.Path, change) -> None:
    from safetensors.numpy import save_file

    t, _ = files.read_tensors(folder)
    change(t)
    save_file(t, str(folder / "model.safetensors"))


def test_every_architecture_is_registered():
    assert set(ARCHITECTURES) >= {"bert", "roberta", "gpt2", "gpt_neox"}


def test_layout_and_identity():
    ck = load(FIXTURES / "gpt_neox")
    assert ck.architecture == "gpt_neox" and ck.n_layers == 2 and ck.vocab == 100
    assert ck.params["wq"].shape == (2, 16, 2, 8) and ck.params["wo"].shape == (2, 2, 8, 16)
    assert ck.params["w1"].shape == (2, 16, 64) and ck.params["bq"].shape == (2, 2, 8)
    assert set(ck.hashes) == {"config.json", "model.safetensors"}
    assert ck.identity()["files"]["model.safetensors"] == files.sha256(
        FIXTURES / "gpt_neox" / "model.safetensors"
    )
    assert ck.fields["rotary_pct"] == 0.5 and ck.fields["kind"] == "parallel2"
    assert load(FIXTURES / "gpt_neox_sequential").fields["kind"] == "pre_ln"
    assert load(FIXTURES / "bert").fields["activation"] == "gelu_exact"
    assert load(FIXTURES / "gpt2").fields["activation"] == "gelu"


def test_hf_cache_layout(tmp_path):
    """models--org--name/{blobs, refs/main, snapshots/<rev>/} with links into the blobs."""
    model = tmp_path / "models--org--tiny-gpt2"
    snap = model / "snapshots" / "abc123"
    (model / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        blob = model / "blobs" / files.sha256(FIXTURES / "gpt2" / f)
        shutil.copy(FIXTURES / "gpt2" / f, blob)
        (snap / f).symlink_to(pathlib.Path("../../blobs") / blob.name)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("abc123")
    ref = load(FIXTURES / "gpt2")
    for p in (snap, model):
        ck = load(p)
        assert ck.folder == snap and ck.hashes == ref.hashes
        np.testing.assert_array_equal(ck.params["wq"], ref.params["wq"])


def test_hf_cache_refs_main_naming_a_missing_revision_is_refused(tmp_path):
    """refs/main that names a revision the cache does not hold is refused, naming refs/main and
    the revision (never the only snapshot silently used instead)."""
    model = tmp_path / "models--org--tiny"
    shutil.copytree(FIXTURES / "gpt2", model / "snapshots" / "abc123")
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("def456\n")
    with pytest.raises(ConfigError, match=r"refs/main names revision 'def456', which is not among"):
        load(model)


def test_a_dangling_link_is_named_as_one(tmp_path):
    (tmp_path / "ck").symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"checkpoint.path: '.*ck' is a link to '.*gone', which"):
        load(tmp_path / "ck")


def test_a_missing_model_type_is_named_missing(tmp_path):
    folder = copy("bert", tmp_path / "m")
    edit_config(folder, model_type=None)
    with pytest.raises(ConfigError, match=r"config.json: model_type: missing \(config.json names"):
        load(folder)


def test_sharded_safetensors(tmp_path):
    from safetensors.numpy import save_file

    t, _ = files.read_tensors(FIXTURES / "bert")
    names = sorted(t)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    (tmp_path / "config.json").write_text((FIXTURES / "bert" / "config.json").read_text())
    for f, ns in shards.items():
        save_file({n: t[n] for n in ns}, str(tmp_path / f))
    index = {"weight_map": {n: f for f, ns in shards.items() for n in ns}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ck, ref = load(tmp_path), load(FIXTURES / "bert")
    assert set(ck.hashes) == {"config.json", *shards}
    np.testing.assert_array_equal(ck.params["w2"], ref.params["w2"])
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ConfigError, match=r"index.json: lists 'model-00002-of-00002.safetensors'"):
        load(tmp_path)


def write_safetensors(path: pathlib.Path, tensors: dict) -> None:
    """The format by hand (8-byte header length, JSON header, raw data): name -> (tag, array)."""
    header, blobs, at = {}, [], 0
    for name, (tag, a) in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": tag, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(len(head).to_bytes(8, "little") + head + b"".join(blobs))


def test_bfloat16_and_float16_are_widened(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    folder = copy("gpt2", tmp_path / "m")
    t, _ = files.read_tensors(folder)
    tagged = {n: ("F32", a) for n, a in t.items()}
    bf = t["transformer.h.0.attn.c_attn.weight"].astype(ml_dtypes.bfloat16)
    tagged["transformer.h.0.attn.c_attn.weight"] = ("BF16", bf.view(np.uint16))
    fc = t["transformer.h.0.mlp.c_fc.weight"].astype(np.float16)
    tagged["transformer.h.0.mlp.c_fc.weight"] = ("F16", fc)
    write_safetensors(folder / "model.safetensors", tagged)
    ck = load(folder)
    assert ck.params["wq"].dtype == np.float32 and ck.params["w1"].dtype == np.float32
    np.testing.assert_array_equal(ck.params["wq"][0].reshape(16, 16), bf.astype(np.float32)[:, :16])
    np.testing.assert_array_equal(ck.params["w1"][0], tagged["transformer.h.0.mlp.c_fc.weight"][1])


@pytest.mark.parametrize("arch", ["bert", "gpt2", "gpt_neox"])
def test_the_safetensors_parser_equals_the_safetensors_package(tmp_path, arch):
    """simlab parses safetensors from the bytes it hashes; the `safetensors` package's own
    reader (an independent implementation) gives the same arrays bit for bit, every dtype a
    checkpoint stores (F32 of the fixtures; F16, F64, I64 and U8 written here) included."""
    from safetensors.numpy import load_file, save_file

    folder = copy(arch, tmp_path / "m")
    t, _ = files.read_tensors(folder)
    t = dict(t)
    first = sorted(t)[0]
    t["x.f16"], t["x.f64"] = t[first].astype(np.float16), t[first].astype(np.float64)
    t["x.i64"], t["x.u8"] = np.arange(7, dtype=np.int64) - 3, np.arange(5, dtype=np.uint8)
    save_file(t, str(folder / "model.safetensors"))
    want = load_file(str(folder / "model.safetensors"))
    got = files.parse_safetensors((folder / "model.safetensors").read_bytes(), folder)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_pytorch_bin_with_torch(tmp_path):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(FIXTURES / "gpt2" / "config.json", folder)
    t, _ = files.read_tensors(FIXTURES / "gpt2")
    torch.save({k: torch.from_numpy(v.copy()) for k, v in t.items()}, folder / "pytorch_model.bin")
    np.testing.assert_array_equal(load(folder).params["w2"], load(FIXTURES / "gpt2").params["w2"])


def test_pytorch_bin_without_torch(tmp_path, monkeypatch):
    import builtins

    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(FIXTURES / "gpt2" / "config.json", folder)
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch":
            raise ImportError("no torch")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ConfigError, match=r"pytorch_model.bin: reading pytorch_model.bin needs"):
        load(folder)


def test_series_is_ordered_by_step(tmp_path):
    for name in ("step10", "step2", "step100"):
        copy("gpt2", tmp_path / name)
    (tmp_path / "notes").mkdir()
    assert [n for n, _ in load_series(tmp_path)] == ["step2", "step10", "step100"]


# ------------------------------------------------------------------------------ errors
def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_missing_path(tmp_path):
    with pytest.raises(ConfigError, match=r"checkpoint.path: '.*nowhere' does not exist") as e:
        load(tmp_path / "nowhere")
    one_line(e)


def test_a_file_not_a_folder():
    with pytest.raises(ConfigError, match=r"checkpoint.path: '.*config.json' is not a directory"):
        load(FIXTURES / "gpt2" / "config.json")


def test_no_config(tmp_path):
    with pytest.raises(ConfigError, match=r"checkpoint.path: no config.json in"):
        load(tmp_path)


def test_cache_with_several_snapshots(tmp_path):
    model = tmp_path / "models--org--x"
    for rev in ("a", "b"):
        copy("gpt2", model / "snapshots" / rev)
    with pytest.raises(ConfigError, match=r"holds 2 snapshots and no refs/main"):
        load(model)


def test_bad_json(tmp_path):
    folder = copy("gpt2", tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config.json: cannot be read as JSON"):
        load(folder)


def test_unsupported_architecture(tmp_path):
    folder = copy("gpt2", tmp_path / "m")
    edit_config(folder, model_type="t5")
    with pytest.raises(
        ConfigError,
        match=r"config.json: model_type: 't5' is not supported; supported: bert, roberta, gpt2",
    ) as e:
        load(folder)
    one_line(e)


UNSUPPORTED = [
    ("gpt2", {"activation_function": "gelu_fast"}, r"activation_function: activation 'gelu_fast' "),
    ("bert", {"hidden_act": "gelu_fast"}, r"hidden_act: activation 'gelu_fast' is not supported"),
    ("bert", {"position_embedding_type": "relative_key"}, r"position_embedding_type: 'relative_"),
    ("bert", {"num_attention_heads": 3}, r"num_attention_heads: 3 does not divide hidden_size 16"),
    ("bert", {"intermediate_size": 0}, r"intermediate_size: must be an integer >= 1, got 0"),
    ("bert", {"hidden_size": None}, r"hidden_size: missing"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, r"scale_attn_by_inverse_layer_idx: True "),
    (
        "gpt_neox",
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
        r"rope_parameters.rope_type: 'linear' is not supported",
    ),
    (
        "gpt_neox",
        {"rope_parameters": {"partial_rotary_factor": 0.375, "rope_theta": 1e4}},
        r"rotary_pct: int\(d_head 8 \* 0.375\) = 3 rotated dims must be even",
    ),
    ("gpt_neox", {"use_parallel_residual": "yes"}, r"use_parallel_residual: must be true or false"),
]


@pytest.mark.parametrize("arch,change,message", UNSUPPORTED)
def test_unsupported_config_values(tmp_path, arch, change, message):
    folder = copy(arch, tmp_path / "m")
    edit_config(folder, **change)
    with pytest.raises(ConfigError, match=r"config.json: " + message) as e:
        load(folder)
    one_line(e)


def test_missing_tensor(tmp_path):
    folder = copy("bert", tmp_path / "m")
    save_tensors(folder, lambda t: t.pop("encoder.layer.1.attention.self.key.bias"))
    with pytest.raises(
        ConfigError,
        match=r"model.safetensors: tensor 'encoder.layer.1.attention.self.key.bias' is missing",
    ) as e:
        load(folder)
    one_line(e)


def test_shape_mismatch(tmp_path):
    folder = copy("gpt_neox", tmp_path / "m")
    name = "gpt_neox.layers.0.mlp.dense_h_to_4h.weight"
    save_tensors(folder, lambda t: t.update({name: t[name][:32]}))
    with pytest.raises(
        ConfigError,
        match=rf"model.safetensors: tensor '{name}' has shape \(32, 16\), config.json implies",
    ):
        load(folder)


def test_wrong_architecture_weights(tmp_path):
    folder = copy("bert", tmp_path / "m")
    shutil.copy(FIXTURES / "gpt2" / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(
        ConfigError, match=r"'embeddings.word_embeddings.weight' is missing .*not a bert"
    ):
        load(folder)


def test_no_weights(tmp_path):
    folder = copy("bert", tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match=r"no model.safetensors, model.safetensors.index.json or"):
        load(folder)


def test_corrupt_weights(tmp_path):
    folder = copy("bert", tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{broken")
    with pytest.raises(ConfigError, match=r"model.safetensors: not a safetensors file"):
        load(folder)


def test_truncated_and_unknown_dtype_weights(tmp_path):
    """A file cut short (offsets past its end) and a dtype simlab cannot read (FP8) are refused
    naming the file and the tensor."""
    folder = copy("bert", tmp_path / "m")
    raw = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(raw[:-4])
    with pytest.raises(ConfigError) as e:
        load(folder)
    assert str(e.value) == (
        f"{folder / 'model.safetensors'}: the file is shorter than its header says (its tensors "
        f"end at byte {len(raw):,}, the file has {len(raw) - 4:,} bytes): it was cut short "
        "(an interrupted download or copy); fetch or copy it again"
    )
    write_safetensors(folder / "model.safetensors", {"a": ("F8_E4M3", np.zeros(4, np.uint8))})
    with pytest.raises(ConfigError, match=r"tensor 'a' has dtype F8_E4M3, which simlab cannot"):
        load(folder)


def test_layers_ids_and_length():
    ck = load(FIXTURES / "bert")
    with pytest.raises(
        ConfigError, match=r"checkpoint.layers: \[2\] is outside the checkpoint's layers"
    ):
        ck.layer_range(2)
    with pytest.raises(ConfigError, match=r"checkpoint.layers: \[0, 2\] must be consecutive"):
        ck.layer_range([0, 2])
    with pytest.raises(
        ConfigError, match=r"inputs: token ids must lie in 0..99 \(vocab_size of .*json"
    ):
        ck.check_ids(np.array([[0, 100]]))
    with pytest.raises(ConfigError, match=r"inputs.length: 33 tokens exceed the checkpoint's 32"):
        ck.check_length(33)
    assert load(FIXTURES / "roberta").max_positions == 32  # 34 rows, from padding_idx + 1 = 2


def _np_bert_layer(x, t, i, d, h, eps):
    """One HF BertLayer in float64 numpy from the checkpoint's tensors (post-LN, exact GELU)."""
    from math import erf

    def w(name):
        return np.asarray(t[f"encoder.layer.{i}.{name}"], np.float64)

    def ln(z, g, b):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / np.sqrt(var + eps) * g + b

    k = d // h
    q, kk, v = (
        (x @ w(f"attention.self.{n}.weight").T + w(f"attention.self.{n}.bias")).reshape(
            x.shape[0], x.shape[1], h, k
        )
        for n in ("query", "key", "value")
    )
    s = np.einsum("bthk,bshk->bhts", q, kk) / np.sqrt(k)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = np.einsum("bhts,bshk->bthk", a, v).reshape(x.shape)
    o = o @ w("attention.output.dense.weight").T + w("attention.output.dense.bias")
    h1 = ln(x + o, w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias"))
    g = h1 @ w("intermediate.dense.weight").T + w("intermediate.dense.bias")
    g = g * 0.5 * (1.0 + np.vectorize(erf)(g / np.sqrt(2.0)))
    m = g @ w("output.dense.weight").T + w("output.dense.bias")
    return ln(h1 + m, w("output.LayerNorm.weight"), w("output.LayerNorm.bias"))


def test_an_mlp_width_that_is_no_multiple_of_the_model_width(tmp_path):
    """intermediate_size 40 at hidden_size 16 (HF allows any width; 100 at 48 was refused): the
    block gets d_ff = 40, and every layer equals a float64 numpy BertLayer on the same tensors
    (to 1e-12 under x64, 1e-5 in float32)."""
    folder = copy("bert", tmp_path / "m")
    edit_config(folder, intermediate_size=40)
    r = np.random.default_rng(0)

    def widen(t):
        for i in range(2):
            t[f"encoder.layer.{i}.intermediate.dense.weight"] = r.normal(0, 0.2, (40, 16)).astype(
                np.float32
            )
            t[f"encoder.layer.{i}.intermediate.dense.bias"] = r.normal(0, 0.1, 40).astype(
                np.float32
            )
            t[f"encoder.layer.{i}.output.dense.weight"] = r.normal(0, 0.2, (16, 40)).astype(
                np.float32
            )

    save_tensors(folder, widen)
    ck = load(folder)
    spec = ck.block()
    assert spec.d_ff == 40 and spec.mlp_width == 40
    t, _ = files.read_tensors(folder)
    ids = np.asarray([[2, 5, 7, 11, 3, 9], [4, 4, 8, 1, 6, 2]])
    for x64, tol in ((True, 1e-12), (False, 1e-5)):
        with jax.enable_x64(x64):
            hs = [np.asarray(a, np.float64) for a in ck.hidden_states(ids)]
        for i in range(2):
            want = _np_bert_layer(hs[i], t, i, 16, 2, 1e-12)
            err = np.max(np.abs(hs[i + 1] - want)) / np.max(np.abs(want))
            assert err < tol, (x64, i, err)


def test_d_ff_and_mlp_ratio_together_are_refused():
    from simlab.core.spec import BlockSpec

    with pytest.raises(ConfigError, match=r"block.d_ff: 40 and mlp_ratio = 2 both set"):
        BlockSpec(d_model=16, n_heads=2, d_ff=40, mlp_ratio=2).validate()
    assert BlockSpec(d_model=16, n_heads=2, d_ff=40).validate().mlp_width == 40
    assert BlockSpec(d_model=16, n_heads=2, mlp_ratio=3).validate().mlp_width == 48


@pytest.mark.parametrize("arch", ["bert", "gpt2", "gpt_neox"])
def test_embedding_geometry_vs_numpy(arch):
    """A checkpoint's token embedding matrix W: partition isotropy (Mu & Viswanath: Z(c) summed
    explicitly over +- each eigenvector of W^T W), PR, IsoScore = (PR - 1)/(D - 1) and the
    common share, against float64 numpy on the fixture's table, under x64."""
    ck = load(FIXTURES / arch)
    w = np.asarray(ck.tables["word"], np.float64)

    def partition(x):
        _, vecs = np.linalg.eigh(x.T @ x)
        z = [np.sum(np.exp(x @ (s * vecs[:, j]))) for j in range(x.shape[1]) for s in (1, -1)]
        return min(z) / max(z)

    c = w - w.mean(0)
    lam = np.linalg.eigvalsh(c.T @ c / len(w))
    pr = lam.sum() ** 2 / np.sum(lam**2)
    with jax.enable_x64(True):
        got = ck.embedding_geometry()
    want = {
        "partition_iso": partition(w),
        "partition_iso_centred": partition(c),
        "participation_ratio": pr,
        "isoscore": (pr - 1) / (w.shape[1] - 1),
        "common_share": np.sum(w.mean(0) ** 2) / np.mean(np.sum(w**2, 1)),
    }
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-9, err_msg=k)
    assert 0 < got["partition_iso"] <= 1 and 0 < got["partition_iso_centred"] <= 1


@pytest.mark.parametrize("head_dim", [3, None])
def test_an_odd_rotary_head_dim_is_refused_at_load_naming_config_json(tmp_path, head_dim):
    """hidden_size 48 over 16 heads: a head dim of 3, which the rotary embeddings cannot turn
    in pairs; refused by load() naming config.json's field (head_dim when it is there), not
    later as block.rotary_pct, a field the user never set."""
    folder = copy("llama", tmp_path / "m")
    edit_config(folder, num_attention_heads=16, head_dim=head_dim)
    field = "head_dim" if head_dim else "num_attention_heads"
    with pytest.raises(ConfigError) as e:
        load(folder)
    assert str(e.value) == (
        f"{folder / 'config.json'}: {field}: the head dim hidden_size 48 / num_attention_heads "
        "16 = 3 is odd; its rotary embeddings turn 3 dims in pairs, which must be even: simlab "
        "cannot run this checkpoint"
    )


def test_file_messages_name_the_files_absolute_on_every_route(tmp_path, monkeypatch):
    """A NaN weight (and every other file message) names the file by its absolute path, whether
    the folder was given relative (load, --set, a dict) or made absolute (a config file)."""
    import simlab

    folder = copy("bert", tmp_path / "ck")
    tensors, _ = files.read_tensors(folder)
    tensors = {k: np.array(v) for k, v in tensors.items()}
    tensors["encoder.layer.1.output.dense.weight"].reshape(-1)[3] = np.nan
    from safetensors.numpy import save_file

    save_file(tensors, str(folder / "model.safetensors"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(
        '[checkpoint]\npath = "ck"\nlayer = 1\n[inputs]\nkind = "tokens"\nvocab = 50\n'
        'batch = 2\nlength = 8\n[[axes]]\nname = "q_scale"\nvalues = [1.0]\n'
    )
    want = (
        f"{folder / 'model.safetensors'}: tensor 'encoder.layer.1.output.dense.weight' holds 1 "
        "NaN or Inf values; simlab never computes on non-finite weights"
    )
    routes = {
        "load": lambda: load("ck"),
        "dict": lambda: simlab.run_sweep(
            {**simlab_tables(), "checkpoint": {"path": "ck", "layer": 1}}, quiet=True
        ),
        "file": lambda: simlab.run_sweep("c.toml", quiet=True),
    }
    for name, route in routes.items():
        with pytest.raises(ConfigError) as e:
            route()
        assert str(e.value) == want, name


def simlab_tables() -> dict:
    return {
        "inputs": {"kind": "tokens", "vocab": 50, "batch": 2, "length": 8},
        "axes": [{"name": "q_scale", "values": [1.0]}],
    }
