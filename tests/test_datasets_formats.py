"""Real-data loaders on small generated files of the public formats.

Each loader is run on a few-node copy of its dataset's layout written into ``tmp_path``:
the graph, features, labels and natural availability must come out as documented, a
malformed line must be reported with its file and line number, and a missing file with
every place that was searched. The offline mirror is hidden so these tests behave the
same on machines with and without ``shared/data``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from benchmark.errors import DataError
from benchmark.federation import GraphDataset
from data_prep.datasets import sources
from data_prep.datasets.fb15k237_typing import FB15k237Typing
from data_prep.datasets.flickr30k import Flickr30k
from data_prep.datasets.magb import MAGB
from data_prep.datasets.ninerec import NineRec
from data_prep.datasets.sources import RemoteFile
from data_prep.datasets.tiktok import TikTok


@pytest.fixture(autouse=True)
def _no_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the test's own files exist: no mirror, no $FEDMM_DATA_ROOT."""
    monkeypatch.setattr(sources, "MIRROR", tmp_path / "no-mirror")
    monkeypatch.delenv(sources.ENV_ROOT, raising=False)


def assert_graph(ds: GraphDataset) -> None:
    """edge_index holds both directions of each edge, in range, no self-loops, no duplicates."""
    ei = ds.edge_index
    assert ei.dtype == torch.long and ei.shape[0] == 2
    if ei.numel():
        assert int(ei.min()) >= 0 and int(ei.max()) < ds.num_nodes
    assert not (ei[0] == ei[1]).any()
    pairs = set(map(tuple, ei.T.tolist()))
    assert len(pairs) == ei.shape[1]
    assert all((b, a) in pairs for a, b in pairs)
    assert ds.available.shape == (ds.num_nodes, len(ds.features))
    for x in ds.features.values():
        assert x.dtype == torch.float32 and torch.isfinite(x).all()


def und_edges(ds: GraphDataset) -> set[tuple[int, int]]:
    return {(a, b) for a, b in ds.edge_index.T.tolist() if a < b}


# --------------------------------------------------------------------------- sources


def test_locate_search_order_and_missing_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, env, mirror = tmp_path / "root", tmp_path / "env", tmp_path / "mirror"
    monkeypatch.setattr(sources, "MIRROR", mirror)
    monkeypatch.setenv(sources.ENV_ROOT, str(env))
    spec = RemoteFile("f.txt", "https://example.org/f.txt", None)
    root.mkdir()
    env.mkdir()
    (mirror / "ds").mkdir(parents=True)
    (mirror / "ds" / "f.txt").write_text("mirror")
    assert sources.locate(spec, "ds", root).read_text() == "mirror"
    (env / "f.txt").write_text("env")  # a place may also hold the file directly
    assert sources.locate(spec, "ds", root).read_text() == "env"
    (root / "ds").mkdir(parents=True)
    (root / "ds" / "f.txt").write_text("root")
    assert sources.locate(spec, "ds", root).read_text() == "root"

    with pytest.raises(DataError) as e:
        sources.locate(RemoteFile("absent.bin", "https://example.org/absent.bin"), "ds", root)
    msg = str(e.value)
    for place in (root, env, mirror):
        assert str(place / "ds" / "absent.bin") in msg and str(place / "absent.bin") in msg
    assert "https://example.org/absent.bin" in msg


def test_explicit_root_that_does_not_exist_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "ds").mkdir(parents=True)
    (mirror / "ds" / "f.txt").write_text("mirror")
    monkeypatch.setattr(sources, "MIRROR", mirror)
    spec = RemoteFile("f.txt")
    assert sources.locate(spec, "ds", None).read_text() == "mirror"  # the implicit default still works
    with pytest.raises(DataError, match=r"data root .*typo \(dataset\.root\) does not exist"):
        sources.locate(spec, "ds", tmp_path / "typo")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(DataError, match=r"a_file \(dataset\.root\) is not a directory"):
        sources.locate(spec, "ds", tmp_path / "a_file")
    monkeypatch.setenv(sources.ENV_ROOT, "/nonexistent/fedmm")
    with pytest.raises(DataError, match=r"data root /nonexistent/fedmm \(\$FEDMM_DATA_ROOT\) does not exist"):
        sources.locate(spec, "ds", None)


def test_missing_env_root_is_a_cli_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from fedmm_bench.cli import main

    monkeypatch.setenv(sources.ENV_ROOT, str(tmp_path / "nonexistent"))
    out = tmp_path / "results.jsonl"
    code = main(["prepare", "--set", "dataset.name=tiktok", "--set", "dataset.cache=false"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "nonexistent") in err
    assert "Traceback" not in err and not out.exists()


def test_sha_mismatch_and_verified_download(tmp_path: Path) -> None:
    src = tmp_path / "remote" / "data.bin"
    src.parent.mkdir()
    src.write_bytes(b"payload")
    good = hashlib.sha256(b"payload").hexdigest()
    root = tmp_path / "root"
    spec = RemoteFile("data.bin", src.as_uri(), good)
    path = sources.locate(spec, "ds", root, download=True)  # urllib with a file:// URL: no network
    assert path == root / "ds" / "data.bin" and path.read_bytes() == b"payload"

    bad = RemoteFile("other.bin", src.as_uri(), "0" * 64)
    with pytest.raises(DataError, match="sha256"):
        sources.locate(bad, "ds", root, download=True)
    assert not (root / "ds" / "other.bin").exists()  # a failed check leaves nothing behind
    (root / "ds" / "other.bin").write_bytes(b"tampered")
    with pytest.raises(DataError, match=r"other\.bin: sha256 .* does not match"):
        sources.locate(bad, "ds", root)
    assert sources.locate(bad, "ds", root, verify=False).read_bytes() == b"tampered"


def test_cache_is_keyed_by_file_content(tmp_path: Path) -> None:
    f = tmp_path / "in.txt"
    f.write_text("a")
    calls = []

    def build() -> GraphDataset:
        calls.append(1)
        return GraphDataset(name="t", features={"x": torch.ones(3, 2)}, edge_index=torch.tensor([[0, 1], [1, 0]]),
                            meta={"tags": ("a", "b"), "n": np.int64(3)})

    args = (True, str(tmp_path / "cache"), "t", 1, {"k": 1}, [f], build)
    a = sources.cached_build(*args)
    b = sources.cached_build(*args)
    assert len(calls) == 1 and b.meta["tags"] == ["a", "b"] and torch.equal(a.features["x"], b.features["x"])
    f.write_text("b")
    sources.cached_build(*args)
    assert len(calls) == 2


# --------------------------------------------------------------------------- tiktok


def write_tiktok(d: Path, users: list[int], items: list[int], shape: tuple[int, int], pkl: bool = False) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    img = rng.standard_normal((shape[1], 4)).astype(np.float16)
    img[1] = 0  # an item without a usable image
    np.save(d / "image_feat.npy", img)
    np.save(d / "audio_feat.npy", rng.standard_normal((shape[1], 3)).astype(np.float16))
    if pkl:
        m = sp.coo_matrix((np.ones(len(users), np.float32), (users, items)), shape=shape)
        (d / "trnMat.pkl").write_bytes(pickle.dumps(m))
    else:
        np.savez(d / "trn_interactions.npz", user=np.array(users), item=np.array(items), shape=np.array(shape))


# users 0 and 1 share items {0, 2}; user 2 links 3-4; item 1 only has its own user
TT_USERS, TT_ITEMS = [0, 0, 0, 1, 1, 2, 2, 3], [0, 2, 5, 0, 2, 3, 4, 1]


def test_tiktok_graph_features_and_pickle(tmp_path: Path) -> None:
    write_tiktok(tmp_path / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    cfg = TikTok.Config(top_k=0, verify=False, cache_dir=str(tmp_path / "c"))
    ds = TikTok(cfg).load(tmp_path)
    assert_graph(ds)
    assert ds.num_nodes == 6 and ds.feature_dims == {"visual": 4, "acoustic": 3} and ds.y is None
    assert und_edges(ds) == {(0, 2), (0, 5), (2, 5), (3, 4)}
    assert ds.available[:, 0].tolist() == [True, False, True, True, True, True]
    assert ds.meta["interactions"]["train"].shape == (2, 8)
    strong = TikTok(TikTok.Config(min_common_users=2, top_k=0, verify=False, cache=False)).load(tmp_path)
    assert und_edges(strong) == {(0, 2)}
    top1 = TikTok(TikTok.Config(top_k=1, verify=False, cache=False)).load(tmp_path)
    assert und_edges(top1) == {(0, 2), (0, 5), (3, 4)}  # 5: 0 and 2 tie (1 shared, popularity 2) -> lower id

    write_tiktok(tmp_path / "orig" / "tiktok", TT_USERS, TT_ITEMS, (4, 6), pkl=True)
    from_pkl = TikTok(TikTok.Config(top_k=0, verify=False, cache=False)).load(tmp_path / "orig")
    assert und_edges(from_pkl) == und_edges(ds)


def test_tiktok_validation_errors(tmp_path: Path) -> None:
    write_tiktok(tmp_path / "tiktok", [0, 1], [0, 9], (2, 6))
    with pytest.raises(DataError, match=r"trn_interactions\.npz: item id 9 at position 1 is outside \[0, 6\)"):
        TikTok(TikTok.Config(verify=False, cache=False)).load(tmp_path)
    write_tiktok(tmp_path / "tiktok", [0, 1], [0, 1], (2, 7))
    np.save(tmp_path / "tiktok" / "image_feat.npy", np.ones((6, 4)))  # 7 items, images for 6
    with pytest.raises(DataError, match=r"image_feat\.npy: has 6 rows, expected 7"):
        TikTok(TikTok.Config(verify=False, cache=False)).load(tmp_path)
    (tmp_path / "tiktok" / "audio_feat.npy").unlink()
    with pytest.raises(DataError, match="missing data file 'audio_feat.npy'") as e:
        TikTok(TikTok.Config(verify=False, cache=False)).load(tmp_path)
    assert str(tmp_path / "tiktok" / "audio_feat.npy") in str(e.value) and "DiffMM" in str(e.value)
    (tmp_path / "tiktok" / "trnMat.pkl").write_bytes(pickle.dumps({"not": "a matrix"}))
    (tmp_path / "tiktok" / "trn_interactions.npz").unlink()
    np.save(tmp_path / "tiktok" / "audio_feat.npy", np.zeros((7, 3)))
    with pytest.raises(DataError, match=r"trnMat\.pkl: .*not allowed|trnMat\.pkl: expected"):
        TikTok(TikTok.Config(verify=False, cache=False)).load(tmp_path)


# --------------------------------------------------------------------------- fb15k237_typing


ENTS = {  # mid: (types, name, description, numeric attributes)
    "/m/f1": (["/film/actor"], "Ann", "American actress", {"height": 1.7}),
    "/m/f2": (["/film/actor", "/film/producer", "/tv/tv_actor"], "Bob", "actor", {"height": 1.8}),
    "/m/f3": (["/film/film"], "Cats", "a 2019 film", {}),
    "/m/t1": (["/film/actor", "/tv/tv_actor"], "Dan", "TV actor", {}),  # tie -> the rarer domain, tv
    "/m/l1": (["/location/location", "/base/x/topic"], "Paris", "capital of France", {"latitude": 48.8}),
    "/m/l2": (["/location/location"], "Lyon", "", {"latitude": 45.7, "population": 5e5}),
    "/m/l3": (["/location/citytown"], "Nice", "city in France", {"latitude": 43.7}),
    "/m/m1": (["/music/artist"], "Eve", "singer", {}),
    "/m/m2": (["/music/album", "/user/foo/bar"], "Blue", "album", {}),
    "/m/b1": (["/base/only/this"], "Odd", "only a base type", {}),  # no domain: dropped
    "/m/u1": ([], "Zed", "untyped", {}),                            # untyped: dropped
}
TRIPLES = [("/m/f1", "/r/a", "/m/f3"), ("/m/f2", "/r/a", "/m/f3"), ("/m/t1", "/r/b", "/m/f2"),
           ("/m/l1", "/r/c", "/m/l2"), ("/m/l2", "/r/c", "/m/l3"), ("/m/m1", "/r/d", "/m/m2"),
           ("/m/f1", "/r/e", "/m/l1"), ("/m/b1", "/r/a", "/m/f1"), ("/m/u1", "/r/a", "/m/m1"),
           ("/m/f3", "/r/x", "/m/f1"), ("/m/m2", "/r/loop", "/m/m2")]


def write_fb15k(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, part in (("train.txt", TRIPLES[:6]), ("valid.txt", TRIPLES[6:9]), ("test.txt", TRIPLES[9:])):
            data = "".join(f"{h}\t{r}\t{t}\n" for h, r, t in part).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (d / "FB15k-237.tar.gz").write_bytes(buf.getvalue())
    (d / "FB15k_mid2name.txt").write_text("".join(f"{m}\t{v[1]}\n" for m, v in ENTS.items()))
    wiki = {m: {"label": v[1], "description": v[2] or None, "alternatives": []} for m, v in ENTS.items()}
    (d / "entity2wikidata.json").write_text(json.dumps(wiki, indent=2))
    (d / "FB15K_NumericalTriples.txt").write_text("".join(
        f"{m}\t<http://rdf.freebase.com/ns/x.{a}>\t{val}\n" for m, v in ENTS.items() for a, val in v[3].items()))
    (d / "entity_types").mkdir(exist_ok=True)
    lines = [f"{m}\t{t}\n" for m, v in ENTS.items() for t in v[0]]
    (d / "entity_types" / "ET_valid.txt").write_text("".join(lines[::2]))
    (d / "entity_types" / "ET_test.txt").write_text("".join(lines[1::2]))


def test_fb15k237_typing_labels_edges_numeric(tmp_path: Path) -> None:
    write_fb15k(tmp_path / "fb15k237")
    cfg = FB15k237Typing.Config(num_classes=4, text_dim=8, verify=False, cache_dir=str(tmp_path / "c"))
    ds = FB15k237Typing(cfg).load(tmp_path)
    assert_graph(ds)
    ents = ds.meta["entities"]
    label = {e: ds.meta["classes"][int(c)] for e, c in zip(ents, ds.y)}
    assert label == {"/m/f1": "film", "/m/f2": "film", "/m/f3": "film", "/m/t1": "tv", "/m/l1": "location",
                     "/m/l2": "location", "/m/l3": "location", "/m/m1": "music", "/m/m2": "music"}
    assert ds.meta["classes"][:2] == ["film", "location"] and ds.num_classes == 4
    idx = {e: i for i, e in enumerate(ents)}
    named = {(ents[a], ents[b]) for a, b in und_edges(ds)}
    assert named == {tuple(sorted(p)) for p in [("/m/f1", "/m/f3"), ("/m/f2", "/m/f3"), ("/m/f2", "/m/t1"),
                                                  ("/m/l1", "/m/l2"), ("/m/l2", "/m/l3"), ("/m/m1", "/m/m2"),
                                                  ("/m/f1", "/m/l1")]}
    num_av = ds.available[:, 1]
    assert {e for e in ents if num_av[idx[e]]} == {"/m/f1", "/m/f2", "/m/l1", "/m/l2", "/m/l3"}
    assert ds.available[:, 0].all() and ds.feature_dims == {"text": 8, "numeric": 3}
    numeric = ds.features["numeric"]
    assert (numeric[~num_av] == 0).all()
    assert ds.meta["numeric_available_fraction"] == pytest.approx(5 / 9)

    desc_only = FB15k237Typing(FB15k237Typing.Config(num_classes=4, text_dim=8, text_source="description",
                                                     presence_flags=True, verify=False, cache=False)).load(tmp_path)
    assert not desc_only.available[idx["/m/l2"], 0] and desc_only.available[:, 0].sum() == 8
    assert desc_only.feature_dims["numeric"] == 6

    again = FB15k237Typing(cfg).load(tmp_path)  # cached
    assert "cache_file" in again.meta and torch.equal(again.features["text"], ds.features["text"])


@pytest.mark.parametrize(
    "rel, line_no, bad, pattern",
    [
        ("entity_types/ET_valid.txt", 2, "/m/f1 film_actor\n", r"ET_valid\.txt: line 2: expected 'mid<TAB>/domain/type'"),
        ("FB15K_NumericalTriples.txt", 1, "/m/f1\t<x>\ttall\n",
         r"NumericalTriples\.txt: line 1: value 'tall' is not a number"),
        ("FB15k_mid2name.txt", 3, "m.f1 Ann\n", r"mid2name\.txt: line 3: expected 'mid<TAB>name'"),
    ],
)
def test_fb15k237_typing_malformed_lines(tmp_path: Path, rel: str, line_no: int, bad: str, pattern: str) -> None:
    d = tmp_path / "fb15k237"
    write_fb15k(d)
    lines = (d / rel).read_text().splitlines(keepends=True)
    lines[line_no - 1] = bad
    (d / rel).write_text("".join(lines))
    with pytest.raises(DataError, match=pattern):
        FB15k237Typing(FB15k237Typing.Config(verify=False, cache=False)).load(tmp_path)


def test_fb15k237_typing_bad_archive_and_json(tmp_path: Path) -> None:
    d = tmp_path / "fb15k237"
    write_fb15k(d)
    (d / "entity2wikidata.json").write_text('{\n  "/m/f1": {"label": "Ann",\n  oops\n}')
    with pytest.raises(DataError, match=r"entity2wikidata\.json: line 3: malformed JSON"):
        FB15k237Typing(FB15k237Typing.Config(verify=False, cache=False)).load(tmp_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"/m/a\t/r\t/m/b\n/m/a\t/r\n"
        info = tarfile.TarInfo("train.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (d / "FB15k-237.tar.gz").write_bytes(buf.getvalue())
    with pytest.raises(DataError, match=r"FB15k-237\.tar\.gz:train\.txt: line 2: expected 'head<TAB>relation<TAB>tail'"):
        FB15k237Typing(FB15k237Typing.Config(verify=False, cache=False)).load(tmp_path)
    (d / "FB15K_NumericalTriples.txt").unlink()
    with pytest.raises(DataError, match="missing data file 'FB15K_NumericalTriples.txt'") as e:
        FB15k237Typing(FB15k237Typing.Config(verify=False, cache=False)).load(tmp_path)
    assert str(d / "FB15K_NumericalTriples.txt") in str(e.value) and "mmkb" in str(e.value)


def test_fb15k237_typing_checks_pinned_sha(tmp_path: Path) -> None:
    write_fb15k(tmp_path / "fb15k237")
    with pytest.raises(DataError, match=r"FB15k-237\.tar\.gz: sha256 .* does not match the pinned"):
        FB15k237Typing(FB15k237Typing.Config(cache=False)).load(tmp_path)


# --------------------------------------------------------------------------- magb


# File names of the MAGB release (huggingface.co/datasets/Sherirto/MAGB), written out here
# rather than taken from the loader so that a regression of its defaults fails these tests.
# Per folder: (prefix, RoBERTa-base text feature file); the token length in the name is the
# release's, per dataset. Source: sktsherlock/SUPRA run_mag_baseline_suite.sh and
# plot/plot_analysis_ntk.py (feature files), UniMAG README (<prefix>.csv, <prefix>Graph.pt).
MAGB_RELEASE = {
    "Movies": ("Movies", "Movies_roberta_base_512_mean.npy"),
    "Toys": ("Toys", "Toys_roberta_base_512_mean.npy"),
    "Grocery": ("Grocery", "Grocery_roberta_base_256_mean.npy"),
    "Reddit-S": ("RedditS", "RedditS_roberta_base_100_mean.npy"),
    "Reddit-M": ("RedditM", "RedditM_roberta_base_100_mean.npy"),
}
MAGB_TEXT_FILE = dict(MAGB_RELEASE.values())  # prefix -> text feature file


def write_magb(d: Path, prefix: str, rows: list[tuple[int, int, str, str]], dims: tuple[int, int] = (5, 4)) -> None:
    """rows: (id, label, neighbors literal, text). Files carry the release's names for ``prefix``."""
    d.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "label", "neighbors", "text"])
    writer.writerows(rows)
    (d / f"{prefix}.csv").write_text(buf.getvalue())
    rng = np.random.default_rng(1)
    (d / "TextFeature").mkdir(exist_ok=True)
    (d / "ImageFeature").mkdir(exist_ok=True)
    np.save(d / "TextFeature" / MAGB_TEXT_FILE[prefix], rng.standard_normal((len(rows), dims[0])))
    img = rng.standard_normal((len(rows), dims[1])).astype(np.float32)
    img[2 % len(rows)] = 0.0  # no image for node 2
    np.save(d / "ImageFeature" / f"{prefix}_openai_clip-vit-large-patch14.npy", img)


MAGB_ROWS = [(0, 1, "[1, 2]", "a red movie"), (1, 0, "[0]", "blue, \"quoted\" film"),
             (2, 2, "[0, 3, 2]", "multi\nline text"), (3, 1, "[]", "")]


def test_magb_layout(tmp_path: Path) -> None:
    write_magb(tmp_path / "magb" / "Movies", "Movies", MAGB_ROWS)
    ds = MAGB(MAGB.Config(cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert_graph(ds)
    assert ds.num_nodes == 4 and ds.num_classes == 3 and ds.y.tolist() == [1, 0, 2, 1]
    assert und_edges(ds) == {(0, 1), (0, 2), (2, 3)}  # self-loop 2-2 dropped
    assert ds.feature_dims == {"text": 5, "image": 4}
    assert ds.available[:, 1].tolist() == [True, True, False, True] and ds.available[:, 0].all()

    write_magb(tmp_path / "Reddit-S", "RedditS", MAGB_ROWS)  # the folder directly under the root
    (tmp_path / "Reddit-S" / "edges.txt").write_text("src dst\n0 3\n1 3\n")
    red = MAGB(MAGB.Config(subset="Reddit-S", graph="edges.txt", text_encoder="hashing", text_dim=16,
                           cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert und_edges(red) == {(0, 3), (1, 3)} and red.feature_dims["text"] == 16
    assert red.available[:, 0].tolist() == [True, True, True, False]  # empty text is missing


@pytest.mark.parametrize(
    "row, pattern",
    [
        ('1,x,"[0]","t"', r"Movies\.csv: line 3: label 'x' is not an integer"),
        ('1,0,"[0, 2","t"', r"Movies\.csv: line 3: neighbors '\[0, 2' is not a list of node ids"),
        ('1,0,"[0, 7]","t"', r"Movies\.csv: line 3: neighbor id 7 is not a node of this file"),
        ('1,0,"[0]"', r"Movies\.csv: line 3: 3 fields, header has 4"),
    ],
)
def test_magb_malformed_csv(tmp_path: Path, row: str, pattern: str) -> None:
    d = tmp_path / "magb" / "Movies"
    write_magb(d, "Movies", [(0, 1, "[1]", "a"), (1, 0, "[0]", "b")])
    lines = (d / "Movies.csv").read_text().splitlines()
    lines[2] = row
    (d / "Movies.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=pattern):
        MAGB(MAGB.Config(cache=False)).load(tmp_path)


def test_magb_missing_feature_names_places(tmp_path: Path) -> None:
    write_magb(tmp_path / "magb" / "Toys", "Toys", MAGB_ROWS)
    (tmp_path / "magb" / "Toys" / "ImageFeature" / "Toys_openai_clip-vit-large-patch14.npy").unlink()
    with pytest.raises(DataError) as e:
        MAGB(MAGB.Config(subset="Toys", cache=False)).load(tmp_path)
    msg = str(e.value)
    rel = "Toys/ImageFeature/Toys_openai_clip-vit-large-patch14.npy"
    assert "missing data file" in msg and str(tmp_path / "magb" / rel) in msg and str(tmp_path / rel) in msg
    assert str(tmp_path / "no-mirror" / "magb" / rel) in msg and "huggingface.co/datasets/Sherirto/MAGB" in msg


def write_magb_release(folder: Path, subset: str, table: str = "neighbors", seed: int = 0) -> dict[str, np.ndarray]:
    """A 4-node copy of one MAGB release folder, every file under the release's name.

    ``table`` picks the adjacency columns of the CSV: ``neighbors``, ``amazon`` (MAGB's
    ``also_buy`` / ``also_view``) or ``reddit`` (``also_posted``, text in ``caption``). The
    DGL graph file is a placeholder (the loader does not read it). Returns the arrays written.
    """
    prefix, text_file = MAGB_RELEASE[subset]
    d = folder / subset
    (d / "TextFeature").mkdir(parents=True)
    (d / "ImageFeature").mkdir()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if table == "amazon":
        writer.writerow(["id", "category", "text", "also_buy", "also_view", "second_category", "label"])
        writer.writerows([(0, "c", "a red film", "[1]", "[2, 1]", "x", 1), (1, "c", "blue", "[]", "[0]", "y", 0),
                          (2, "c", "", "[]", "[3]", "z", 2), (3, "c", "green", "[]", "[]", "x", 1)])
    elif table == "reddit":
        writer.writerow(["id", "subreddit", "caption", "url", "also_posted", "label"])
        writer.writerows([(0, "r/a", "a cat", "u", "[0, 1]", 1), (1, "r/b", "a dog", "u", "[0, 1]", 0),
                          (2, "r/c", "", "u", "[2, 3]", 2), (3, "r/a", "sky", "u", "[2, 3]", 1)])
    else:
        writer.writerow(["id", "label", "neighbors", "text"])
        writer.writerows([(0, 1, "[1, 2]", "a"), (1, 0, "[0]", "b"), (2, 2, "[3]", "c"), (3, 1, "[]", "d")])
    (d / f"{prefix}.csv").write_text(buf.getvalue())
    (d / f"{prefix}Graph.pt").write_bytes(b"DGL graph placeholder")
    rng = np.random.default_rng(seed)
    arrays = {"text": rng.standard_normal((4, 6)).astype(np.float32),
              "image": rng.standard_normal((4, 3)).astype(np.float32)}
    np.save(d / "TextFeature" / text_file, arrays["text"])
    np.save(d / "ImageFeature" / f"{prefix}_openai_clip-vit-large-patch14.npy", arrays["image"])
    return arrays


@pytest.mark.parametrize("subset", list(MAGB_RELEASE))
def test_magb_reads_release_file_names(tmp_path: Path, subset: str) -> None:
    """Default options read exactly the release's files of each MAGB dataset (e.g. Grocery's
    ``_256_`` and Reddit's ``_100_`` RoBERTa files), from a folder laid out like the release."""
    arrays = write_magb_release(tmp_path / "magb", subset)
    prefix, text_file = MAGB_RELEASE[subset]
    loader = MAGB(MAGB.Config(subset=subset, cache_dir=str(tmp_path / "c")))
    url = f"https://huggingface.co/datasets/Sherirto/MAGB/resolve/main/{subset}"
    files = loader.files()
    assert {k: f.name for k, f in files.items()} == {
        "csv": f"{subset}/{prefix}.csv",
        "text": f"{subset}/TextFeature/{text_file}",
        "image": f"{subset}/ImageFeature/{prefix}_openai_clip-vit-large-patch14.npy",
    }
    assert files["text"].url == f"{url}/TextFeature/{text_file}"
    ds = loader.load(tmp_path)
    assert_graph(ds)
    assert ds.meta["files"]["text"] == str(tmp_path / "magb" / subset / "TextFeature" / text_file)
    assert torch.equal(ds.features["text"], torch.from_numpy(arrays["text"]))
    assert torch.equal(ds.features["image"], torch.from_numpy(arrays["image"]))
    assert ds.y.tolist() == [1, 0, 2, 1] and und_edges(ds) == {(0, 1), (0, 2), (2, 3)}


def test_magb_feature_options_override_release_names(tmp_path: Path) -> None:
    """text_feature / image_feature name other files of the folder ({prefix} expands)."""
    write_magb_release(tmp_path / "magb", "Reddit-S")
    d = tmp_path / "magb" / "Reddit-S"
    other = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
    np.save(d / "TextFeature" / "RedditS_Llama_3.2_1B_Instruct_100_mean.npy", other)
    np.save(d / "ImageFeature" / "RedditS_Llama-3.2-11B-Vision-Instruct_visual.npy", other * 2)
    cfg = MAGB.Config(subset="Reddit-S", cache=False,
                      text_feature="TextFeature/{prefix}_Llama_3.2_1B_Instruct_100_mean.npy",
                      image_feature="ImageFeature/RedditS_Llama-3.2-11B-Vision-Instruct_visual.npy")
    ds = MAGB(cfg).load(tmp_path)
    assert torch.equal(ds.features["text"], torch.from_numpy(other))
    assert torch.equal(ds.features["image"], torch.from_numpy(other * 2))


@pytest.mark.parametrize("subset, table", [("Toys", "amazon"), ("Reddit-M", "reddit")])
def test_magb_adjacency_from_release_columns(tmp_path: Path, subset: str, table: str) -> None:
    """A table without ``neighbors`` gives the graph of MAGB's build scripts: also_buy + also_view
    (Amazon) or also_posted (Reddit); Reddit's text is its ``caption`` column."""
    write_magb_release(tmp_path / "magb", subset, table=table)
    ds = MAGB(MAGB.Config(subset=subset, cache=False)).load(tmp_path)
    assert_graph(ds)
    if table == "amazon":
        assert und_edges(ds) == {(0, 1), (0, 2), (2, 3)}
        assert ds.meta["neighbor_columns"] == ["also_buy", "also_view"]
    else:
        assert und_edges(ds) == {(0, 1), (2, 3)}  # self-loops of also_posted dropped
        assert ds.meta["neighbor_columns"] == ["also_posted"]
        enc = MAGB(MAGB.Config(subset=subset, cache=False, text_encoder="hashing", text_dim=8)).load(tmp_path)
        assert enc.meta["text_column"] == "caption" and enc.available[:, 0].tolist() == [True, True, False, True]
    (tmp_path / "magb" / subset / f"{MAGB_RELEASE[subset][0]}.csv").write_text("id,label\n0,1\n")
    with pytest.raises(DataError, match=r"missing column\(s\) neighbors or also_buy \+ also_view or also_posted"):
        MAGB(MAGB.Config(subset=subset, cache=False)).load(tmp_path)


def test_magb_missing_release_file_is_one_line_naming_it(tmp_path: Path) -> None:
    """A missing default file: one line naming the release file, the places searched, the
    option that points elsewhere and the same-prefix files that are there."""
    write_magb_release(tmp_path / "magb", "Grocery")
    d = tmp_path / "magb" / "Grocery"
    (d / "TextFeature" / "Grocery_roberta_base_256_mean.npy").unlink()
    np.save(d / "TextFeature" / "Grocery_ModernBERT_base_256_mean.npy", np.zeros((4, 2), np.float32))
    with pytest.raises(DataError) as e:
        MAGB(MAGB.Config(subset="Grocery", cache=False)).load(tmp_path)
    msg = str(e.value)
    rel = "Grocery/TextFeature/Grocery_roberta_base_256_mean.npy"
    assert "\n" not in msg and msg.startswith(f"missing data file '{rel}'")
    assert str(tmp_path / "magb" / rel) in msg and str(tmp_path / rel) in msg
    assert "dataset.text_feature" in msg and "dataset.text_encoder=hashing|minilm" in msg
    assert "FEDMM_DATA_ROOT" in msg and "files there: Grocery_ModernBERT_base_256_mean.npy" in msg
    assert "huggingface.co/datasets/Sherirto/MAGB/resolve/main/" + rel in msg

    (d / "ImageFeature" / "Grocery_openai_clip-vit-large-patch14.npy").unlink()
    with pytest.raises(DataError) as e:
        MAGB(MAGB.Config(subset="Grocery", cache=False, text_encoder="hashing")).load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "'Grocery/ImageFeature/Grocery_openai_clip-vit-large-patch14.npy'" in msg
    assert "dataset.image_feature" in msg and "dataset.text_feature" not in msg

    (d / "Grocery.csv").unlink()
    with pytest.raises(DataError) as e:
        MAGB(MAGB.Config(subset="Grocery", cache=False, text_encoder="hashing")).load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("missing data file 'Grocery/Grocery.csv'") and "dataset.root" in msg


def test_mmgraph_ele_fashion(tmp_path: Path) -> None:
    d = tmp_path / "magb" / "ele-fashion"
    d.mkdir(parents=True)
    n = 6
    torch.save(np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0]]), d / "nc_edges-nodeid.pt")  # numpy inside
    torch.save(torch.tensor([0, 1, -1, 1, 0, 2]), d / "labels-w-missing.pt")
    torch.save({"train_idx": torch.tensor([0, 1, 3]), "val_idx": torch.tensor([4]), "test_idx": torch.tensor([5, 2])},
               d / "split.pt")
    feats = torch.randn(n, 8)
    feats[1, 4:] = 0  # node 1 has no image half
    torch.save(feats, d / "clip_feat.pt")
    ds = MAGB(MAGB.Config(subset="ele-fashion", cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert_graph(ds)
    assert ds.num_nodes == 5 and ds.meta["dropped_unlabeled"] == 1
    assert ds.y.tolist() == [0, 1, 1, 0, 2] and ds.num_classes == 3
    assert und_edges(ds) == {(2, 3), (3, 4), (0, 4), (0, 1)}  # old ids 3-4, 4-5, 5-0, 0-1; node 2 removed
    assert torch.equal(ds.features["text"], feats[[0, 1, 3, 4, 5], :4])
    assert ds.available[:, 1].tolist() == [True, False, True, True, True]
    assert ds.train_mask.tolist() == [True, True, True, False, False] and ds.test_mask.tolist()[-1]

    torch.save(torch.randn(n, 7), d / "clip_feat.pt")
    with pytest.raises(DataError, match=r"clip_feat\.pt: expected \[N, 2d\]"):
        MAGB(MAGB.Config(subset="ele-fashion", cache=False)).load(tmp_path)
    (d / "clip_feat.pt").write_bytes(pickle.dumps(GraphDataset, protocol=2))  # arbitrary object, as a DGL graph would be
    with pytest.raises(DataError, match=r"clip_feat\.pt: not a plain tensor/list file"):
        MAGB(MAGB.Config(subset="ele-fashion", cache=False)).load(tmp_path)


# --------------------------------------------------------------------------- ninerec


def write_ninerec(d: Path, pairs: list[str], items: list[str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "KU_pair.csv").write_text("\n".join(pairs) + "\n")
    (d / "KU_item.csv").write_text("\n".join(items) + "\n")
    rng = np.random.default_rng(2)
    np.save(d / "KU_image_feat.npy", rng.standard_normal((len(items), 6)))
    txt = rng.standard_normal((len(items), 5))
    txt[3] = np.nan  # a failed extraction
    np.save(d / "KU_text_feat.npy", txt)


NR_ITEMS = ["v1,标题一,first video", "v2,标题二,", "v3,标题三,third", "v4,标题四,fourth"]
NR_PAIRS = ["v1,u1,100", "v2,u1,101", "v1,u2,102", "v2,u2,103", "v3,u2,104", "v4,u3,105"]


def test_ninerec_layout(tmp_path: Path) -> None:
    write_ninerec(tmp_path / "ninerec" / "KU", ["item_id,user_id,timestamp"] + NR_PAIRS, NR_ITEMS)
    ds = NineRec(NineRec.Config(subset="KU", top_k=0, cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert_graph(ds)
    assert ds.num_nodes == 4 and ds.meta["item_ids"] == ["v1", "v2", "v3", "v4"] and ds.meta["num_users"] == 3
    assert und_edges(ds) == {(0, 1), (0, 2), (1, 2)}
    assert ds.available[:, 0].tolist() == [True, True, True, False] and ds.available[:, 1].all()
    strong = NineRec(NineRec.Config(subset="KU", min_common_users=2, text_encoder="hashing", text_dim=8,
                                    cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert und_edges(strong) == {(0, 1)} and strong.feature_dims["text"] == 8
    assert strong.available[:, 0].all()  # v2 has no English title: its Chinese title is used


def test_ninerec_malformed_and_missing(tmp_path: Path) -> None:
    d = tmp_path / "ninerec" / "KU"
    write_ninerec(d, NR_PAIRS[:2] + ["v9,u1,5"], NR_ITEMS)
    with pytest.raises(DataError, match=r"KU_pair\.csv: line 3: item id 'v9' is not in the item file"):
        NineRec(NineRec.Config(subset="KU", cache=False)).load(tmp_path)
    write_ninerec(d, ["v1,u1,yesterday"], NR_ITEMS)
    with pytest.raises(DataError, match=r"KU_pair\.csv: line 1: timestamp 'yesterday' is not a number"):
        NineRec(NineRec.Config(subset="KU", cache=False)).load(tmp_path)
    write_ninerec(d, NR_PAIRS, NR_ITEMS + ["v1,again"])
    with pytest.raises(DataError, match=r"KU_item\.csv: line 5: item id 'v1' appears twice"):
        NineRec(NineRec.Config(subset="KU", cache=False)).load(tmp_path)
    with pytest.raises(DataError) as e:
        NineRec(NineRec.Config(subset="DY", cache=False)).load(tmp_path)
    assert str(tmp_path / "ninerec" / "DY" / "DY_pair.csv") in str(e.value) and "drive.google.com" in str(e.value)



def test_ninerec_missing_features_say_they_are_not_in_the_release(tmp_path: Path) -> None:
    """NineRec ships covers and titles, not features: the missing-file line says so and names the options."""
    d = tmp_path / "ninerec" / "KU"
    write_ninerec(d, NR_PAIRS, NR_ITEMS)
    (d / "KU_image_feat.npy").unlink()
    with pytest.raises(DataError) as e:
        NineRec(NineRec.Config(subset="KU", cache=False)).load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("missing data file 'KU/KU_image_feat.npy'")
    assert "not in the NineRec release, which ships KU_cover/ images" in msg and "dataset.image_feature" in msg
    np.save(d / "KU_image_feat.npy", np.ones((len(NR_ITEMS), 3)))
    (d / "KU_text_feat.npy").unlink()
    with pytest.raises(DataError) as e:
        NineRec(NineRec.Config(subset="KU", cache=False)).load(tmp_path)
    msg = str(e.value)
    assert msg.startswith("missing data file 'KU/KU_text_feat.npy'") and "dataset.text_encoder=hashing|minilm" in msg

# --------------------------------------------------------------------------- flickr30k

FLICKR_CAPS = {f"{i}.jpg": [f"caption {k} of image {i} {'dog' if i < 3 else 'sea'}" for k in range(2)] for i in range(6)}


def write_flickr(d: Path, fmt: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    if fmt == "token":
        (d / "results_20130124.token").write_text(
            "".join(f"{img}#{k}\t{c}\n" for img, cs in FLICKR_CAPS.items() for k, c in enumerate(cs)))
    elif fmt == "json":
        imgs = [{"filename": img, "split": "test" if i == 5 else "train", "sentences": [{"raw": c} for c in cs]}
                for i, (img, cs) in enumerate(FLICKR_CAPS.items())]
        (d / "dataset_flickr30k.json").write_text(json.dumps({"images": imgs, "dataset": "flickr30k"}))
    else:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["raw", "sentids", "split", "filename", "img_id"])
        writer.writerows([json.dumps(cs), "[]", "train", img, i] for i, (img, cs) in enumerate(FLICKR_CAPS.items()))
        (d / "flickr_annotations_30k.csv").write_text(buf.getvalue())
    centers = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    rng = np.random.default_rng(3)
    feats = np.stack([centers[int(i >= 3)] + 0.05 * rng.standard_normal(3) for i in range(6)])
    order = [5, 0, 3, 1, 4, 2]  # stored out of node order: matched by id
    np.savez(d / "image_feat.npz", ids=np.array([f"{i}.jpg" for i in order]), features=feats[order])
    per_caption = np.repeat(np.arange(6), 2)
    np.savez(d / "text_feat.npz", ids=np.array([f"{i}.jpg" for i in per_caption]),
             features=rng.standard_normal((12, 4)))


@pytest.mark.parametrize("fmt", ["token", "json", "csv"])
def test_flickr30k_formats_and_knn(tmp_path: Path, fmt: str) -> None:
    write_flickr(tmp_path / "flickr30k", fmt)
    ds = Flickr30k(Flickr30k.Config(k=2, cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert_graph(ds)
    assert ds.meta["images"] == list(FLICKR_CAPS) and ds.feature_dims == {"text": 4, "image": 3}
    assert und_edges(ds) == {(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)}  # kNN stays inside each cluster
    assert ds.available.all()
    if fmt == "json":
        assert ds.meta["karpathy_split"].tolist() == [0, 0, 0, 0, 0, 2]
    enc = Flickr30k(Flickr30k.Config(k=1, text_encoder="hashing", text_dim=8, cache_dir=str(tmp_path / "c"))).load(tmp_path)
    assert enc.feature_dims["text"] == 8 and enc.num_edges >= 3


def test_flickr30k_malformed_and_missing(tmp_path: Path) -> None:
    d = tmp_path / "flickr30k"
    write_flickr(d, "token")
    lines = (d / "results_20130124.token").read_text().splitlines()
    lines[3] = "1.jpg 1 a caption without the tab"
    (d / "results_20130124.token").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"results_20130124\.token: line 4: expected '<image>#<k><TAB><caption>'"):
        Flickr30k(Flickr30k.Config(cache=False)).load(tmp_path)
    write_flickr(d, "token")
    (d / "image_feat.npz").unlink()
    with pytest.raises(DataError, match="missing data file 'image_feat.npz'") as e:
        Flickr30k(Flickr30k.Config(cache=False)).load(tmp_path)
    assert str(d / "image_feat.npz") in str(e.value) and str(tmp_path / "image_feat.npz") in str(e.value)
    (d / "results_20130124.token").unlink()
    with pytest.raises(DataError) as e:
        Flickr30k(Flickr30k.Config(cache=False)).load(tmp_path)
    assert all(name in str(e.value) for name in ("results_20130124.token", "dataset_flickr30k.json",
                                                   "flickr_annotations_30k.csv", "nlphuji/flickr30k"))


@pytest.mark.parametrize(
    "cls, bad, pattern",
    [
        (TikTok, {"top_k": -1}, "dataset.top_k"),
        (FB15k237Typing, {"text_encoder": "bert"}, "dataset.text_encoder must be one of svd, minilm, hashing"),
        (FB15k237Typing, {"num_classes": 1}, "dataset.num_classes"),
        (MAGB, {"subset": "Movie"}, "dataset.subset must be one of Movies"),
        (NineRec, {"subset": "XY"}, "dataset.subset must be one of DY"),
        (Flickr30k, {"k": 0}, "dataset.k"),
        (Flickr30k, {"captions": "x.txt"}, "dataset.captions must be one of auto"),
    ],
)
def test_config_validation(cls: type, bad: dict, pattern: str) -> None:
    from benchmark.errors import ConfigError

    from benchmark.config import build_dataclass

    with pytest.raises(ConfigError, match=pattern):
        build_dataclass(cls.Config, bad, "dataset")


def test_fb15k237_typing_minilm_option_uses_features_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``text_encoder: minilm`` goes through data_prep.features (stubbed here: no model load)."""
    import data_prep.features as features

    seen: dict[str, object] = {}

    def fake_encode(texts: list[str], encoder: str = "minilm", cache_dir: object = None, **_: object) -> torch.Tensor:
        seen.update(encoder=encoder, n=len(texts), cache_dir=cache_dir)
        return torch.ones(len(texts), features.MINILM_DIM)

    monkeypatch.setattr(features, "encode_texts", fake_encode)
    write_fb15k(tmp_path / "fb15k237")
    cfg = FB15k237Typing.Config(num_classes=4, text_encoder="minilm", text_source="description", verify=False,
                                cache_dir=str(tmp_path / "c"))
    ds = FB15k237Typing(cfg).load(tmp_path)
    assert seen["encoder"] == "minilm" and seen["n"] == ds.num_nodes and ds.feature_dims["text"] == 384
    assert (ds.features["text"][~ds.available[:, 0]] == 0).all() and (~ds.available[:, 0]).sum() == 1


def _write_flickr_many(d: Path, n: int, seed: int = 0) -> np.ndarray:
    """n images in two clusters (token captions, image/text feature files); returns the image rows."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "results_20130124.token").write_text("".join(f"{i}.jpg#0\tcaption of image {i}\n" for i in range(n)))
    rng = np.random.default_rng(seed)
    centers = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    image = np.stack([centers[i % 2] + 0.3 * rng.standard_normal(4) for i in range(n)])
    np.savez(d / "image_feat.npz", ids=np.array([f"{i}.jpg" for i in range(n)]), features=image)
    np.savez(d / "text_feat.npz", ids=np.array([f"{i}.jpg" for i in range(n)]), features=rng.standard_normal((n, 5)))
    return image


def test_flickr30k_graph_is_redrawn_from_observed_images_only(tmp_path: Path) -> None:
    """After node-level masking, a node whose image is hidden has no edge, and changing the
    hidden images' true values changes nothing a client receives (edges or features)."""
    from benchmark.config import DatasetConfig, MissingConfig, OutputConfig, PartitionConfig, RunConfig, SplitConfig
    from data_prep.build import build_federation

    def federation(root: Path):
        cfg = RunConfig(seed=0, dataset=DatasetConfig(name="flickr30k", root=str(root), params={"k": 3, "cache": False}),
                        partition=PartitionConfig(name="iid", num_clients=2, params={}),
                        missing=MissingConfig(name="node_level", fill="zeros", params={"rate": 0.4}),
                        split=SplitConfig(train=0.6, val=0.2, test=0.2),
                        output=OutputConfig(cache_dir=str(root / "cache")))
        return build_federation(cfg)

    image = _write_flickr_many(tmp_path / "a" / "flickr30k", 40)
    fed = federation(tmp_path / "a")
    pooled = fed.pooled
    img = fed.modalities.index("image")
    hidden = ~pooled.available[:, img]
    assert 0 < int(hidden.sum()) < 40
    touched = torch.zeros(40, dtype=torch.bool)
    touched[pooled.edge_index.reshape(-1)] = True
    assert not (touched & hidden).any() and touched[~hidden].all()  # observed images keep their kNN
    # new true values for the hidden images: every client's graph and rows stay bit-identical
    ids = np.flatnonzero(hidden.numpy())
    changed = image.copy()
    changed[ids] = -changed[ids] + 5.0
    d = tmp_path / "b" / "flickr30k"
    _write_flickr_many(d, 40)
    np.savez(d / "image_feat.npz", ids=np.array([f"{i}.jpg" for i in range(40)]), features=changed)
    other = federation(tmp_path / "b")
    assert torch.equal(other.pooled.available, pooled.available)
    for a, b in zip(fed.clients, other.clients):
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.boundary_edges, b.boundary_edges)
        assert all(torch.equal(a.features[m], b.features[m]) for m in a.features)
