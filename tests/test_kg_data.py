"""KG datasets: the container, FB15K-237 loader (on generated and real files), the embedded
subset, the synthetic generator and the image-feature loader."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.errors import DataError
from benchmark.registry import DATASETS
from data_prep.kg import fb15k237 as fb
from data_prep.kg.dataset import KGDataset
from data_prep.kg.fb15k237 import (
    RemoteFile, download_file, encode_numeric_items, load_entity_image_features, load_fb15k237, locate,
)
from data_prep.kg.fb15k237_small import load_fb15k237_small
from data_prep.kg.synthetic import make_synthetic_kg

REAL = (fb.MIRROR / "fb15k237" / "FB15k-237.tar.gz").is_file()
needs_real = pytest.mark.skipif(not REAL, reason="shared/data/fb15k237 is not present")


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: on a shared 2-core box, 2-thread ops stall on each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- fake FB15K-237


def _write_fake_fb(root: Path, train: str | None = None) -> Path:
    d = root / "fb15k237"
    d.mkdir(parents=True)
    members = {
        "train.txt": train if train is not None else "/m/a\t/r/x\t/m/b\n/m/b\t/r/y\t/m/c\n/m/c\t/r/x\t/m/a\n",
        "valid.txt": "/m/a\t/r/y\t/m/c\n",
        "test.txt": "/m/b\t/r/x\t/m/c\n",
    }
    with tarfile.open(d / "FB15k-237.tar.gz", "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"FB15k-237/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (d / "FB15k_mid2name.txt").write_text("/m/a\tAlpha_One\n/m/b\tBeta\n/m/c\tGamma\n")
    (d / "entity2wikidata.json").write_text(json.dumps({
        "/m/a": {"label": "Alpha", "description": "first letter", "alternatives": ["alpha", "A letter"]},
        "/m/b": {"label": "Beta", "description": None, "alternatives": []},
    }))
    (d / "FB15K_NumericalTriples.txt").write_text(
        "/m/a\t<http://rdf.freebase.com/ns/x.height>\t1.5\n/m/b\t<http://rdf.freebase.com/ns/x.height>\t2.5\n"
        "/m/zz\t<http://rdf.freebase.com/ns/x.height>\t9\n/m/c\t<http://rdf.freebase.com/ns/x.year>\t1990.0\n")
    return root


def test_loader_on_generated_files(tmp_path):
    root = _write_fake_fb(tmp_path)
    d = load_fb15k237(root, text_encoder="hashing", cache_dir=None, verify=False)
    assert d.entities == ["/m/a", "/m/b", "/m/c"] and d.relations == ["/r/x", "/r/y"]
    assert d.train.tolist() == [[0, 0, 1], [1, 1, 2], [2, 0, 0]]
    assert d.test.tolist() == [[1, 0, 2]]
    # text: a has name, description, one alias ("alpha" duplicates the label); b name only;
    # c has no Wikidata entry and falls back to mid2name
    assert d.item_text["text"] == ["Alpha", "first letter", "A letter", "Beta", "Gamma"]
    assert d.item_entity["text"].tolist() == [0, 0, 0, 1, 2]
    assert d.meta["text_kinds"] == ["name", "description", "alias", "name", "name"]
    # numeric: the unknown entity /m/zz is dropped
    assert d.item_entity["numeric"].tolist() == [0, 1, 2]
    assert d.item_feats["numeric"].shape == (3, 64)
    assert len(d.fingerprint()) == 16


@pytest.mark.parametrize("bad,line", [("/m/a\t/r/x\t/m/b\n/m/b\t/r/y\n", 2), ("/m/a /r/x /m/b\n", 1)])
def test_malformed_triple_line_names_file_and_line(tmp_path, bad, line):
    root = _write_fake_fb(tmp_path, train=bad)
    with pytest.raises(DataError, match=rf"train\.txt: line {line}:"):
        load_fb15k237(root, text_encoder="none", verify=False)


def test_malformed_side_files(tmp_path):
    root = _write_fake_fb(tmp_path)
    d = root / "fb15k237"
    (d / "FB15K_NumericalTriples.txt").write_text("/m/a\tattr\t1.0\n/m/b\tattr\tabc\n")
    with pytest.raises(DataError, match=r"FB15K_NumericalTriples.txt: line 2: value 'abc'"):
        load_fb15k237(root, text_encoder="none", verify=False)
    (d / "FB15K_NumericalTriples.txt").write_text("")
    (d / "FB15k_mid2name.txt").write_text("/m/a\tAlpha\nbroken line without tab\n")
    with pytest.raises(DataError, match=r"FB15k_mid2name.txt: line 2"):
        load_fb15k237(root, text_encoder="none", verify=False)
    (d / "FB15k_mid2name.txt").write_text("/m/a\tAlpha\n")
    (d / "entity2wikidata.json").write_text('{\n"/m/a": {"label": "A",\n}')
    with pytest.raises(DataError, match=r"entity2wikidata.json: line 3: malformed JSON"):
        load_fb15k237(root, text_encoder="none", verify=False)


def test_both_fb15k237_loaders_share_one_set_of_readers():
    """Issue 30: the FB15K-237 file readers exist once (data_prep/fb15k237_files.py); neither loader
    defines a function of the same name again, and both use the shared objects."""
    import ast
    import inspect

    from data_prep import fb15k237_files as files
    from data_prep.datasets import fb15k237_typing

    shared = {n for n, f in vars(files).items() if inspect.isfunction(f) and f.__module__ == files.__name__}
    assert {"parse_triples", "read_triples_archive", "read_mid2name", "read_wikidata"} <= shared
    for mod in (fb, fb15k237_typing):
        tree = ast.parse(Path(inspect.getfile(mod)).read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert not defined & shared, f"{mod.__name__} defines its own {sorted(defined & shared)}"
        for name in ("read_triples_archive", "read_mid2name", "read_wikidata"):
            assert getattr(mod, name) is getattr(files, name), (mod.__name__, name)


def test_fb15k237_reader_policy(tmp_path):
    """The one policy of the shared readers: blank lines anywhere and CRLF accepted; a bad line,
    a field with surrounding whitespace, a bad archive or bad JSON entry is one DataError line
    naming the file (archive:member) and, where there is one, the line."""
    from data_prep.fb15k237_files import parse_triples, read_mid2name, read_triples_archive, read_wikidata

    assert parse_triples("a\tr\tb\r\n\r\n  \nc\tr\td\n\n", "w") == [("a", "r", "b"), ("c", "r", "d")]
    for text, msg in [("a\tr\tb\nc\tr\n", r"w: line 2: expected 'head<TAB>relation<TAB>tail', got 'c\\tr'"),
                      ("a\t\tb\n", r"w: line 1: expected 'head<TAB>relation<TAB>tail'"),
                      ("a\tr\tb\nb\tr\t c\n", r"w: line 2: field ' c' has surrounding whitespace")]:
        with pytest.raises(DataError, match=msg):
            parse_triples(text, "w")

    def archive(name: str, members: dict[str, bytes], mode: str = "w:gz") -> Path:
        path = tmp_path / name
        with tarfile.open(path, mode) as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    ok = {"train.txt": b"a\tr\tb\n", "valid.txt": b"b\tr\tc\r\n", "test.txt": b"c\tr\ta"}
    assert read_triples_archive(archive("ok.tar.bz2", ok, "w:bz2")) == {  # "r:*": any compression
        "train": [("a", "r", "b")], "valid": [("b", "r", "c")], "test": [("c", "r", "a")]}
    bad_utf8 = archive("u.tar.gz", {**ok, "valid.txt": b"b\tr\tc\n\xff\tr\ta\n"})
    big = "".join(f"/m/{i}\t/r/{i % 7}\t/m/{i * 7919 % 10007}\n" for i in range(20000)).encode()
    good = archive("g.tar.gz", {**ok, "train.txt": big}).read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(good[: len(good) // 2])
    (tmp_path / "not.tar.gz").write_bytes(b"not an archive\n" * 100)
    no_valid = archive("m.tar.gz", {"train.txt": b"a\tr\tb\n"})
    for path, msg in [(bad_utf8, r"u\.tar\.gz:valid\.txt: line 2: not UTF-8 text"),
                      (no_valid, r"m\.tar\.gz: archive has no member valid\.txt \(members: train\.txt\)"),
                      (tmp_path / "cut.tar.gz", r"cut\.tar\.gz(:train\.txt)?: truncated or corrupt"),
                      (tmp_path / "not.tar.gz", r"not\.tar\.gz: not a readable tar archive")]:
        with pytest.raises(DataError, match=msg) as e:
            read_triples_archive(path)
        assert "\n" not in str(e.value)

    (tmp_path / "names.txt").write_text("/m/a\tAlpha_One\r\n\n/m/b \tBeta\n")
    with pytest.raises(DataError, match=r"names\.txt: line 3: field '/m/b ' has surrounding whitespace"):
        read_mid2name(tmp_path / "names.txt")
    (tmp_path / "names.txt").write_text("/m/a\tAlpha_One\r\n\n/m/b\tBeta\n")
    assert read_mid2name(tmp_path / "names.txt") == {"/m/a": "Alpha One", "/m/b": "Beta"}
    wiki = {"/m/a": {"label": "A", "description": None, "alternatives": None}, "/m/b": {"label": "B"}}
    (tmp_path / "w.json").write_text(json.dumps(wiki, indent=1))
    assert read_wikidata(tmp_path / "w.json") == wiki
    for entry, msg in [({"label": 5}, "'label' must be a string or null"),
                       ({"label": "B", "alternatives": ["x", 1]}, "'alternatives' must be a list of strings")]:
        (tmp_path / "w.json").write_text(json.dumps({**wiki, "/m/b": entry}, indent=1))
        with pytest.raises(DataError, match=rf"w\.json: line 7: entry '/m/b': {msg}"):
            read_wikidata(tmp_path / "w.json")


def test_missing_file_lists_every_place(tmp_path, monkeypatch):
    import data_prep.datasets.sources as sources

    monkeypatch.setattr(sources, "MIRROR", tmp_path / "mirror")  # the shared lookup helper reads it
    monkeypatch.setenv(fb.ENV_ROOT, str(tmp_path / "env"))
    (tmp_path / "env").mkdir()  # explicit roots must exist (a missing one is its own error)
    (tmp_path / "root").mkdir()
    with pytest.raises(DataError) as e:
        locate("FB15k-237.tar.gz", tmp_path / "root")
    msg = str(e.value)
    for place in ("root", "env", "mirror"):
        assert str(tmp_path / place / "fb15k237" / "FB15k-237.tar.gz") in msg
        assert str(tmp_path / place / "FB15k-237.tar.gz") in msg
    assert "raw.githubusercontent.com" in msg


def test_checksum_mismatch_is_a_data_error(tmp_path, monkeypatch):
    root = _write_fake_fb(tmp_path)
    monkeypatch.setattr(fb, "MIRROR", tmp_path / "nowhere")
    monkeypatch.delenv(fb.ENV_ROOT, raising=False)
    with pytest.raises(DataError, match="sha256"):
        locate("FB15k_mid2name.txt", root)


def test_download_verifies_sha256(tmp_path):
    src = tmp_path / "src.txt"
    src.write_bytes(b"hello\n")
    good = RemoteFile("f.txt", src.as_uri(), hashlib.sha256(b"hello\n").hexdigest())
    out = download_file(good, tmp_path / "dl")
    assert out.read_bytes() == b"hello\n"
    bad = RemoteFile("g.txt", src.as_uri(), "0" * 64)
    with pytest.raises(DataError, match="sha256"):
        download_file(bad, tmp_path / "dl")
    assert not (tmp_path / "dl" / "g.txt").exists()


def test_file_table_matches_shared_sha256sums():
    sums = fb.MIRROR / "SHA256SUMS"
    if not sums.is_file():
        pytest.skip("shared/data is not present")
    table = {Path(p).name: h for h, p in (line.split() for line in sums.read_text().splitlines() if line.strip())}
    for name, spec in fb.FILES.items():
        assert table[name] == spec.sha256, name


def test_numeric_encoding_is_vocabulary_independent():
    a = encode_numeric_items(["h", "h", "y"], [1.0, 3.0, 2000.0], dim=16)
    b = encode_numeric_items(["h", "h"], [1.0, 3.0], dim=16)
    assert np.allclose(a[:2], b)          # adding another attribute does not change h's codes
    assert not np.allclose(a[0], a[1])    # the value matters
    single = encode_numeric_items(["y"], [5.0], dim=16)
    assert np.isfinite(single).all()


# --------------------------------------------------------------------------- image features


def test_image_feature_formats(tmp_path):
    ents = ["/m/06rf7", "/m/0c94fn", "/m/016ywr"]
    d1 = tmp_path / "dir"
    d1.mkdir()
    np.save(d1 / "m.06rf7.npy", np.ones(4, dtype=np.float32))
    torch.save(torch.zeros(2, 4), d1 / "m_0c94fn.pth")
    np.save(d1 / "m.unknown.npy", np.ones(4, dtype=np.float32))
    x, own, info = load_entity_image_features(d1, ents)
    assert x.shape == (3, 4) and sorted(own.tolist()) == [0, 1, 1]
    assert info == {"items": 3, "unmatched_ids": 1, "entities_without": 1}

    torch.save({"/m/016ywr": torch.arange(4.0), "m.06rf7": torch.ones(3, 4)}, tmp_path / "all.pth")
    x, own, _ = load_entity_image_features(tmp_path / "all.pth", ents)
    assert own.tolist() == [2, 0, 0, 0] and x[0].tolist() == [0, 1, 2, 3]

    np.savez(tmp_path / "all.npz", **{"m.016ywr": np.ones(4)})
    x, own, _ = load_entity_image_features(tmp_path / "all.npz", ents)
    assert own.tolist() == [2]

    np.save(d1 / "m.016ywr.npy", np.ones(5, dtype=np.float32))
    with pytest.raises(DataError, match="differs from the first file"):
        load_entity_image_features(d1, ents)
    with pytest.raises(DataError, match="not found"):
        load_entity_image_features(tmp_path / "absent", ents)


# --------------------------------------------------------------------------- container, synthetic


def test_kgdataset_validates_ids():
    t = torch.tensor([[0, 0, 1]])
    with pytest.raises(DataError, match="entity id outside"):
        KGDataset("x", ["a"], ["r"], t, t[:0], t[:0])
    with pytest.raises(DataError, match="owned by an entity id outside"):
        KGDataset("x", ["a", "b"], ["r"], t, t[:0], t[:0], item_feats={"m": torch.ones(1, 2)},
                  item_entity={"m": torch.tensor([5])})


def test_synthetic_kg_shapes_patterns_and_determinism():
    d = make_synthetic_kg(num_entities=120, seed=3)
    assert d.num_triples > 200 and set(d.modalities) == {"text", "image"}
    T = d.all_triples()
    names = d.relations
    sym = names.index("symmetric")
    pairs = {(int(h), int(t)) for h, r, t in T.tolist() if r == sym}
    assert all((t, h) in pairs for h, t in pairs)
    inv = names.index("inverse_of_typed_0")
    fwd = {(int(h), int(t)) for h, r, t in T.tolist() if r == 0}
    assert {(int(t), int(h)) for h, r, t in T.tolist() if r == inv} == fwd
    assert any(n.startswith("compose_") for n in names)
    feats, has = d.entity_features("text")
    assert feats.shape == (120, 32) and 0 < int(has.sum()) <= 120
    assert d.fingerprint() == make_synthetic_kg(num_entities=120, seed=3).fingerprint()
    assert d.fingerprint() != make_synthetic_kg(num_entities=120, seed=4).fingerprint()


# --------------------------------------------------------------------------- registry, embedded subset


def test_registered_kg_datasets_have_configs():
    for name in ("fb15k237", "fb15k237_small", "synthetic_kg"):
        cls = DATASETS.get(name)
        cfg = cls.Config()
        assert all("help" in f.metadata for f in cfg.__dataclass_fields__.values())
    d = DATASETS.get("synthetic_kg")(DATASETS.get("synthetic_kg").Config(num_entities=60)).load(None)
    assert isinstance(d, KGDataset) and d.num_entities == 60


def test_embedded_subset_loads_and_matches_manifest():
    d = DATASETS.get("fb15k237_small")().load(None)
    manifest = json.loads((fb.REPO_ROOT / "data" / "fb15k237_small" / "manifest.json").read_text())
    c = manifest["counts"]
    assert (d.num_entities, d.num_relations) == (c["entities"], c["relations"])
    assert (len(d.train), len(d.valid), len(d.test)) == (c["train"], c["valid"], c["test"])
    assert 20_000 <= c["triples"] <= 30_000
    assert d.feature_dims == {"text": 384, "numeric": 64}
    assert len(d.item_text["text"]) == c["text_items"]
    norms = d.item_feats["text"].norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2)  # unit-norm MiniLM, float16-rounded


def test_embedded_subset_detects_tampering(tmp_path):
    src = fb.REPO_ROOT / "data" / "fb15k237_small"
    dst = tmp_path / "fb15k237_small"
    dst.mkdir()
    for f in src.iterdir():
        dst.joinpath(f.name).write_bytes(f.read_bytes())
    with open(dst / "relations.tsv", "a") as f:
        f.write("/extra/relation\n")
    with pytest.raises(DataError, match="sha256"):
        load_fb15k237_small(tmp_path)
    (dst / "relations.tsv").write_bytes((src / "relations.tsv").read_bytes())
    rows = (dst / "text_items.tsv").read_text().splitlines()
    rows[3] = "notanumber\tname\tX"
    (dst / "text_items.tsv").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"text_items.tsv: line 4"):
        load_fb15k237_small(tmp_path, verify=False)


@needs_real
def test_real_fb15k237_counts():
    d = load_fb15k237(text_encoder="none")
    assert (d.num_entities, d.num_relations) == (14541, 237)
    assert (len(d.train), len(d.valid), len(d.test)) == (272115, 17535, 20466)
    assert int((d.items_per_entity("numeric") > 0).sum()) == 12402
    assert len(d.item_text) == 0 and d.modalities == ["numeric"]
