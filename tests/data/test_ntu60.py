"""Split NTU-60: the raw .skeleton parser, the converter and importers, the paper's class order, and
the benchmark reader, on tiny files written in exactly the real formats."""

from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from xder_data import ntu60  # registers seq-ntu60
from xder_data.benchmark import benchmark_defaults, load_benchmark
from xder_data.errors import BenchmarkFormatError, DataNotFoundError

SPREAD = np.stack([0.01 * np.arange(25), 0.02 * np.arange(25), -0.005 * np.arange(25)], axis=1)  # (25, 3)


def body(base: tuple[float, float, float], velocity: tuple[float, float, float], time: float, scale=1.0):
    """(25, 3) joints of a body moving linearly: base + scale * spread + velocity * time."""
    return np.asarray(base) + scale * SPREAD + np.asarray(velocity) * time


def write_skeleton(path: Path, frames: list[list[np.ndarray]], newline: str = "\n") -> None:
    """Write frames (each a list of (25, 3) bodies) in the raw NTU .skeleton format."""
    lines = [str(len(frames))]
    for bodies in frames:
        lines.append(str(len(bodies)))
        for k, joints in enumerate(bodies):
            lines.append(f"{72057594037931101 + k} 0 1 1 1 1 0 0.02764709 0.05745083 2")
            lines.append("25")
            lines.extend(
                f"{x!r} {y!r} {z!r} 277.419 191.8218 1036.233 519.1677 -0.2059419 0.05349901 0.9692109 "
                "-0.1239193 2"
                for x, y, z in joints.tolist()
            )
    path.write_bytes((newline.join(lines) + newline).encode("ascii"))


# Body tracks of the fixtures (base, velocity per frame).
A_BODY = ((0.1, 0.2, 3.0), (0.1, 0.0, 0.05))
B_STILL = ((-0.5, 0.1, 3.2), (0.0, 0.0, 0.0))
B_MOVING = ((0.5, 0.1, 3.1), (0.05, 0.02, 0.0))
C_STILL = ((-0.4, 0.0, 2.8), (0.0, 0.0, 0.0))
C_SLOW = ((0.3, 0.1, 2.9), (0.02, 0.0, 0.01))
C_FAST = ((0.0, 0.3, 3.5), (1.0, 0.5, 0.0))
C_EXTRA = ((0.2, -0.2, 3.3), (0.0, 0.0, 0.0))


def _track(track, t: float, scale: float = 1.0) -> np.ndarray:
    return body(track[0], track[1], t, scale)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("raw") / "nturgb+d_skeletons"
    folder.mkdir()
    # A: train (P001), action 18, LF, 6 frames, one body, frame 3 (index 2) with bodyCount 0.
    write_skeleton(
        folder / "S001C001P001R001A018.skeleton",
        [[] if f == 2 else [_track(A_BODY, f)] for f in range(6)],
    )
    # B: test (P003), action 50, CRLF, 8 frames, two bodies; the second listed moves more.
    write_skeleton(
        folder / "S001C002P003R002A050.skeleton",
        [[_track(B_STILL, f), _track(B_MOVING, f)] for f in range(8)],
        newline="\r\n",
    )
    # C: train (P002), action 60, LF, 10 frames; a third, fast body in frames 4..6 and a fourth,
    # still and narrower one in frame 5 (four bodies there).
    frames = []
    for f in range(10):
        bodies = [_track(C_STILL, f), _track(C_SLOW, f)]
        if 4 <= f <= 6:
            bodies.append(_track(C_FAST, f))
        if f == 5:
            bodies.append(_track(C_EXTRA, f, scale=0.5))
        frames.append(bodies)
    write_skeleton(folder / "S002C003P002R001A060.skeleton", frames)
    # D: train (P004), CRLF, 7 frames, none with a body: a missing skeleton.
    write_skeleton(folder / "S003C001P004R002A043.skeleton", [[] for _ in range(7)], newline="\r\n")
    # E: test (P006), action 1, LF, 5 frames; named in the official missing list.
    write_skeleton(folder / "S001C001P006R001A001.skeleton", [[_track(A_BODY, f)] for f in range(5)])
    # F: an NTU-120 sample (setup 18, action 61) in the same folder.
    write_skeleton(folder / "S018C001P008R001A061.skeleton", [[_track(A_BODY, 0)]])
    return folder


@pytest.fixture(scope="module")
def missing_list(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lists") / "NTU_RGBD_samples_with_missing_skeletons.txt"
    path.write_text(
        "Samples with missing skeletons\n\n(302 samples)\nS001C001P006R001A001\nS017C003P020R002A060\n"
    )
    return path


@pytest.fixture(scope="module")
def converted(raw, missing_list, tmp_path_factory):
    root = tmp_path_factory.mktemp("root9")
    report = ntu60.prepare_ntu60(raw, root, num_frames=9, missing_list=missing_list)
    return root, report


def _read(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        out = {"attrs": dict(f.attrs)}
        for split in ("train", "test"):
            group = f[split]
            out[split] = {key: group[key][...] for key in group}
            out[split]["dtypes"] = {key: group[key].dtype for key in group}
            out[split]["chunks"] = group["data"].chunks
    return out


# ---------------------------------------------------------------------------------------------
# The parser


def test_parser_reads_bodies_by_position_with_crlf_and_empty_frames(raw) -> None:
    a = ntu60.read_skeleton(raw / "S001C001P001R001A018.skeleton")
    assert a.body_counts.tolist() == [1, 1, 0, 1, 1, 1]
    assert a.joints.shape == (6, 1, 25, 3)
    np.testing.assert_array_equal(a.joints[3, 0], _track(A_BODY, 3))
    assert not a.joints[2].any()
    b = ntu60.read_skeleton(raw / "S001C002P003R002A050.skeleton")  # CRLF
    assert b.joints.shape == (8, 2, 25, 3)
    np.testing.assert_array_equal(b.joints[7, 1], _track(B_MOVING, 7))
    c = ntu60.read_skeleton(raw / "S002C003P002R001A060.skeleton")
    assert c.body_counts.tolist() == [2, 2, 2, 2, 3, 4, 3, 2, 2, 2]
    assert c.joints.shape == (10, 4, 25, 3)
    d = ntu60.read_skeleton(raw / "S003C001P004R002A043.skeleton")
    assert d.joints.shape == (7, 0, 25, 3)


def test_sample_names() -> None:
    name = ntu60.parse_sample_name("/x/S001C002P003R002A013.skeleton")
    assert name == ntu60.SampleName(
        name="S001C002P003R002A013", setup=1, camera=2, subject=3, replication=2, action=13
    )
    assert ntu60.parse_sample_name("S001C002P003R002A13.skeleton") is None
    assert ntu60.parse_sample_name("notes.skeleton") is None


def test_energy_picks_the_most_moving_bodies() -> None:
    still = np.stack([_track(B_STILL, f) for f in range(8)])
    moving = np.stack([_track(B_MOVING, f) for f in range(8)])
    joints = np.stack([still, moving], axis=1)  # (8, 2, 25, 3)
    energy = ntu60.body_energy(joints)
    # By hand for the still body: only the joint spread varies, std over 25 joints of 0.01 j etc.
    spread_std = np.array([0.01, 0.02, 0.005]) * np.arange(25).std()
    assert energy[0] == pytest.approx(spread_std.sum())
    assert energy[1] > energy[0]
    chosen = ntu60.select_bodies(joints, "energy")
    np.testing.assert_array_equal(chosen[:, 0], moving)
    np.testing.assert_array_equal(ntu60.select_bodies(joints, "first")[:, 0], still)
    one = ntu60.select_bodies(joints[:, :1], "energy")
    assert one.shape == (8, 2, 25, 3)
    assert not one[:, 1].any()


def test_resample_frames_by_hand() -> None:
    # C=1, V=1, M=2; body 0 present in all 4 frames (values 2, 10, 20, 40), body 1 only in frame 1.
    x = np.zeros((1, 4, 1, 2))
    x[0, :, 0, 0] = [2.0, 10.0, 20.0, 40.0]
    x[0, 1, 0, 1] = 5.0
    out = ntu60.resample_frames(x, 7)  # positions 0, 0.5, 1, ..., 3
    np.testing.assert_allclose(out[0, :, 0, 0], [2, 6, 10, 15, 20, 30, 40])
    # Body 1 is never blended with its absence: nearest frame (the later one at a tie).
    np.testing.assert_allclose(out[0, :, 0, 1], [0, 5, 5, 0, 0, 0, 0])
    assert out.dtype == np.float32
    single = ntu60.resample_frames(x[:, 1:2], 5)
    np.testing.assert_allclose(single[0, :, 0, 0], [10.0] * 5)


# ---------------------------------------------------------------------------------------------
# The converter


def test_report_counts(converted) -> None:
    _, report = converted
    assert (report.train, report.test) == (2, 1)
    assert report.skipped == {"missing_list": 1, "no_body": 1, "not_ntu60": 1, "malformed": 0}
    assert report.skipped_missing == 2
    assert report.path.name == "xsub.h5"


def test_layout_attributes_and_split(converted) -> None:
    root, _ = converted
    f = _read(root / "ntu60" / "xsub.h5")
    assert f["attrs"] == {
        "layout": "CTVM",
        "num_class": 60,
        "benchmark": "xsub",
        "num_frames": 9,
        "max_bodies": 2,
        "body_selection": "energy",
        "missing_skeletons_removed": True,
        "source": "raw",
    }
    train, test = f["train"], f["test"]
    assert train["data"].shape == (2, 3, 9, 25, 2)
    assert train["chunks"] == (1, 3, 9, 25, 2)
    assert train["dtypes"] == {
        "data": np.float32,
        "label": np.int64,
        "length": np.int32,
        "name": np.dtype("S20"),
    }
    assert train["name"].tolist() == [b"S001C001P001R001A018", b"S002C003P002R001A060"]
    assert test["name"].tolist() == [b"S001C002P003R002A050"]
    assert train["label"].tolist() == [17, 59]
    assert test["label"].tolist() == [49]
    assert train["length"].tolist() == [5, 10]  # A's empty frame dropped
    assert test["length"].tolist() == [8]


def _expected(track, times, scale=1.0) -> np.ndarray:
    """(3, len(times), 25) of a linear track at the given (fractional) times."""
    return np.stack([_track(track, t, scale) for t in times], axis=0).transpose(2, 0, 1)


def test_resampled_values_by_hand(converted) -> None:
    root, _ = converted
    f = _read(root / "ntu60" / "xsub.h5")
    a, c = f["train"]["data"]
    # A: valid frames 0, 1, 3, 4, 5 (frame 2 had no body); 9 outputs at positions k / 2 over them.
    a_times = [0, 0.5, 1, 2, 3, 3.5, 4, 4.5, 5]
    np.testing.assert_allclose(a[:, :, :, 0], _expected(A_BODY, a_times), atol=1e-6)
    assert not a[:, :, :, 1].any()  # no second body
    # C: energy keeps the fast third body (frames 4..6 only) as body 0 and the slow one as body 1;
    # positions 9/8 k over frames 0..9.
    positions = [1.125 * k for k in range(9)]
    np.testing.assert_allclose(c[:, :, :, 1], _expected(C_SLOW, positions), atol=1e-6)
    # Body 0 exists only where both neighbours hold it (k = 4, 5 at 4.5, 5.625); at 3.375 the
    # nearer frame 3 lacks it, at 6.75 the nearer frame 7 does.
    np.testing.assert_allclose(c[:, 4:6, :, 0], _expected(C_FAST, [4.5, 5.625]), atol=1e-6)
    assert not c[:, :4, :, 0].any()
    assert not c[:, 6:, :, 0].any()
    # B (test): 8 frames to 9 outputs; the second-listed, moving body becomes body 0.
    b = f["test"]["data"][0]
    positions = [7 / 8 * k for k in range(9)]
    np.testing.assert_allclose(b[:, :, :, 0], _expected(B_MOVING, positions), atol=1e-6)
    np.testing.assert_allclose(b[:, :, :, 1], _expected(B_STILL, positions), atol=1e-6)


def test_default_conversion_without_list_and_with_first_bodies(raw, tmp_path) -> None:
    report = ntu60.prepare_ntu60(raw, tmp_path, bodies="first")
    assert (report.train, report.test) == (2, 2)
    assert report.skipped == {"missing_list": 0, "no_body": 1, "not_ntu60": 1, "malformed": 0}
    f = _read(tmp_path / "ntu60" / "xsub.h5")
    assert f["train"]["data"].shape == (2, 3, 80, 25, 2)
    assert f["attrs"]["num_frames"] == 80
    assert f["attrs"]["body_selection"] == "first"
    assert f["test"]["name"].tolist() == [b"S001C001P006R001A001", b"S001C002P003R002A050"]
    b = f["test"]["data"][1]
    # First-listed bodies: B's still body stays body 0; resampling keeps both ends.
    np.testing.assert_allclose(b[:, 0, :, 0], _track(B_STILL, 0).T, atol=1e-6)
    np.testing.assert_allclose(b[:, -1, :, 1], _track(B_MOVING, 7).T, atol=1e-6)
    assert not list(tmp_path.glob("ntu60/*.partial"))


# ---------------------------------------------------------------------------------------------
# Malformed inputs


def _single(tmp_path: Path, name: str, text: bytes) -> Path:
    folder = tmp_path / "raw"
    folder.mkdir()
    (folder / name).write_bytes(text)
    return folder


def _valid_text(newline: str = "\n") -> str:
    lines = ["2"]
    for f in range(2):
        lines += ["1", "72057594037931101 0 1 1 1 1 0 0.02764709 0.05745083 2", "25"]
        lines += [f"0.{j + 1} 0.2 3.{f} 277.4 191.8 1036.2 519.1 -0.2 0.05 0.96 -0.12 2" for j in range(25)]
    return newline.join(lines) + newline


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t[: t.index("3.1 277.4") + 3], r"line 33: file ends here, expected 25 joint lines"),
        (lambda t: t.replace("0.3 0.2 3.0", "0.3 0.2x 3.0"), r"line 7: '0.2x' is not a number"),
        (lambda t: "1.5" + t[1:], r"line 1: expected the frame count"),
        (lambda t: t.replace("\n25\n", "\n24\n", 1), r"line 4: expected jointCount 25 .*got 24"),
        (lambda t: t + "1\n", r"line 58: unexpected data after the last of 2 frames"),
        (lambda t: t.replace("72057594037931101", "7.2e16", 1), r"line 3: expected an integer bodyID"),
        (lambda t: "", r"line 1: file ends here, expected the frame count"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, mutate, message) -> None:
    raw = _single(tmp_path, "S001C001P001R001A001.skeleton", mutate(_valid_text()).encode())
    with pytest.raises(BenchmarkFormatError, match=message) as info:
        ntu60.prepare_ntu60(raw, tmp_path / "root")
    assert "S001C001P001R001A001.skeleton" in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "root" / "ntu60" / "xsub.h5").exists()
    assert not list((tmp_path / "root" / "ntu60").glob("*"))  # the partial file is removed


def test_the_valid_text_helper_parses_in_both_line_endings(tmp_path) -> None:
    for newline, name in (("\n", "lf.skeleton"), ("\r\n", "crlf.skeleton")):
        (tmp_path / name).write_bytes(_valid_text(newline).encode())
        recording = ntu60.read_skeleton(tmp_path / name)
        assert recording.joints[1, 0, 24].tolist() == [0.25, 0.2, 3.1]


def test_bad_names_raise_or_are_counted(tmp_path) -> None:
    folder = _single(tmp_path, "notes.skeleton", _valid_text().encode())
    (folder / "S001C001P001R001A002.skeleton").write_bytes(_valid_text().encode())
    (folder / "S001C001P002R001A003.skeleton").write_bytes(_valid_text().encode()[:-30])
    with pytest.raises(BenchmarkFormatError, match=r"notes\.skeleton: not an NTU sample name"):
        ntu60.prepare_ntu60(folder, tmp_path / "root")
    report = ntu60.prepare_ntu60(folder, tmp_path / "root", on_error="skip")
    assert (report.train, report.test) == (1, 0)
    assert report.skipped["malformed"] == 2
    assert any("S001C001P002R001A003.skeleton: line 57: file ends here" in line for line in report.malformed)


def test_missing_inputs(tmp_path, raw) -> None:
    with pytest.raises(DataNotFoundError, match="does not exist"):
        ntu60.prepare_ntu60(tmp_path / "nowhere", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError, match=r"no \.skeleton files"):
        ntu60.prepare_ntu60(tmp_path / "empty", tmp_path)
    with pytest.raises(DataNotFoundError, match="missing-skeleton list"):
        ntu60.prepare_ntu60(raw, tmp_path, missing_list=tmp_path / "nope.txt")
    bad_list = tmp_path / "list.txt"
    bad_list.write_text("a\nb\nc\nS001C001P001R001A001\nnot a name\n")
    with pytest.raises(BenchmarkFormatError, match=r"list\.txt: line 5"):
        ntu60.read_missing_list(bad_list)


# ---------------------------------------------------------------------------------------------
# Importers of the preprocessed distributions


def _padded(tracks_per_body, frames: int, total: int = 300, empty: tuple[int, ...] = ()) -> np.ndarray:
    """(3, total, 25, 2): each body's track over ``frames`` frames, zero elsewhere."""
    x = np.zeros((3, total, 25, 2), dtype=np.float32)
    for m, track in enumerate(tracks_per_body):
        for f in range(frames):
            if f not in empty:
                x[:, f, :, m] = _track(track, f).T
    return x


def _dump(path: Path, obj) -> None:
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


@pytest.fixture
def stgcn(tmp_path) -> Path:
    folder = tmp_path / "NTU-RGB-D" / "xsub"
    folder.mkdir(parents=True)
    train = np.stack([_padded([A_BODY], 12, empty=(5,)), np.zeros((3, 300, 25, 2), np.float32)])
    np.save(folder / "train_data.npy", train)
    _dump(
        folder / "train_label.pkl",
        (["S001C001P001R001A018.skeleton", "S001C001P002R001A001.skeleton"], [17, 0]),
    )
    np.save(folder / "val_data.npy", _padded([B_STILL, B_MOVING], 7)[None])
    _dump(folder / "val_label.pkl", (["S001C001P003R001A050.skeleton"], [49]))
    return folder.parent


def test_stgcn_importer(stgcn, tmp_path) -> None:
    report = ntu60.import_ntu60_stgcn(stgcn, tmp_path / "root", num_frames=12)
    assert (report.train, report.test) == (1, 1)
    assert report.skipped["no_body"] == 1  # the all-zero sample
    f = _read(tmp_path / "root" / "ntu60" / "xsub.h5")
    assert f["attrs"]["source"] == "st-gcn"
    assert f["attrs"]["body_selection"] == "first"
    assert f["train"]["length"].tolist() == [11]  # last non-zero frame 11, frame 5 empty
    assert f["train"]["label"].tolist() == [17]
    # 11 valid frames (0-4, 6-11) to 12 outputs: positions 10/11 k over them.
    valid = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    times = []
    for k in range(12):
        p = k * 10 / 11
        lo = int(np.floor(p))
        hi = min(lo + 1, 10)
        times.append(valid[lo] + (p - lo) * (valid[hi] - valid[lo]))
    np.testing.assert_allclose(f["train"]["data"][0, :, :, :, 0], _expected(A_BODY, times), atol=1e-5)
    assert not f["train"]["data"][0, :, :, :, 1].any()
    assert f["test"]["name"].tolist() == [b"S001C001P003R001A050"]
    assert f["test"]["length"].tolist() == [7]


def test_efficientgcn_importer_uses_the_pkl_length(tmp_path) -> None:
    folder = tmp_path / "data" / "original" / "ntu-xsub"
    folder.mkdir(parents=True)
    np.save(folder / "train_data.npy", _padded([A_BODY], 10)[None])
    _dump(
        folder / "train_label.pkl",
        (["/raw/nturgb+d_skeletons/S001C001P001R001A018.skeleton"], [17], [6]),
    )
    np.save(folder / "eval_data.npy", _padded([B_MOVING, B_STILL], 8)[None])
    _dump(folder / "eval_label.pkl", (["S001C001P003R001A050.skeleton"], [49], [8]))
    report = ntu60.import_ntu60_efficientgcn(tmp_path / "data", tmp_path / "root", num_frames=11)
    assert (report.train, report.test) == (1, 1)
    f = _read(tmp_path / "root" / "ntu60" / "xsub.h5")
    assert f["attrs"]["source"] == "efficientgcn"
    assert f["attrs"]["body_selection"] == "energy"
    assert f["train"]["length"].tolist() == [6]
    # Only the first 6 frames: 11 outputs at positions k / 2.
    np.testing.assert_allclose(
        f["train"]["data"][0, :, :, :, 0], _expected(A_BODY, [k / 2 for k in range(11)]), atol=1e-6
    )
    np.testing.assert_allclose(
        f["test"]["data"][0, :, :, :, 1], _expected(B_STILL, [0.7 * k for k in range(11)]), atol=1e-6
    )


def test_importer_errors(stgcn, tmp_path) -> None:
    root = tmp_path / "root"
    folder = stgcn / "xsub"
    _dump(folder / "val_label.pkl", (["S001C001P003R001A050.skeleton"], [48]))
    with pytest.raises(BenchmarkFormatError, match=r"val_label\.pkl: entry 0: label 48 does not match"):
        ntu60.import_ntu60_stgcn(stgcn, root)
    _dump(folder / "val_label.pkl", (["S001C001P001R001A050.skeleton"], [49]))
    with pytest.raises(BenchmarkFormatError, match="is not an X-sub test subject"):
        ntu60.import_ntu60_stgcn(stgcn, root)
    _dump(folder / "val_label.pkl", {"names": []})
    with pytest.raises(BenchmarkFormatError, match="expected a 2-tuple"):
        ntu60.import_ntu60_stgcn(stgcn, root)
    _dump(folder / "val_label.pkl", (["S001C001P003R001A050.skeleton"], [49]))
    np.save(folder / "val_data.npy", np.zeros((1, 3, 300, 25, 1), np.float32))
    with pytest.raises(BenchmarkFormatError, match=r"shape \(1, 3, 300, 25, 1\), expected"):
        ntu60.import_ntu60_stgcn(stgcn, root)
    (folder / "val_data.npy").unlink()
    with pytest.raises(DataNotFoundError, match=r"val_data\.npy does not exist"):
        ntu60.import_ntu60_stgcn(stgcn, root)
    with pytest.raises(DataNotFoundError, match=r"eval_data\.npy \+ eval_label\.pkl"):
        ntu60.import_ntu60_efficientgcn(stgcn, root)
    assert not root.exists() or not list(root.rglob("*.h5"))


# ---------------------------------------------------------------------------------------------
# The paper's class order

PAPER_TO_OFFICIAL_NAME = {
    "put on glasses": "wear on glasses",
    "cross hands in front": "cross hands in front (say stop)",
    "falling down": "falling",
    "staggering": "staggering",
    "fan self": "use a fan (with hand or paper)/feeling warm",
    "salute": "salute",
    "throw": "throw",
    "punch/slap": "punching/slapping other person",
    "pushing": "pushing other person",
    "put palms together": "put the palms together",
    "hand waving": "hand waving",
    "sneeze/cough": "sneeze/cough",
    "type on a keyboard": "typing on a keyboard",
    "nod head/bow": "nod head/bow",
    "check time (from watch)": "check time (from watch)",
    "brush teeth": "brushing teeth",
    "hugging": "hugging other person",
    "wipe face": "wipe face",
    "eat meal": "eat meal/snack",
    "shaking hands": "handshaking",
    "put on jacket": "wear jacket",
    "reading": "reading",
    "take off a shoe": "take off a shoe",
    "put on a shoe": "wear a shoe",
    "tear up paper": "tear up paper",
    "reach into pocket": "reach into pocket",
    "point to something": "pointing to something with finger",
    "drink water": "drink water",
    "kicking something": "kicking something",
    "sit down": "sitting down",
    "headache": "touch head (headache)",
    "pat on back": "pat on back of other person",
    "play with phone/tablet": "playing with phone/tablet",
    "writing": "writing",
    "stand up": "standing up (from sitting position)",
    "back pain": "touch back (backache)",
    "walking towards": "walking towards each other",
    "shake head": "shake head",
    "walking apart": "walking apart from each other",
    "touch pocket": "touch other person's pocket",
    "take off glasses": "take off glasses",
    "point finger": "point finger at the other person",
    "brush hair": "brushing hair",
    "taking a selfie": "taking a selfie",
    "giving object": "giving something to other person",
    "take off jacket": "take off jacket",
    "take off a hat/cap": "take off a hat/cap",
    "kicking": "kicking other person",
    "phone call": "make a phone call/answer phone",
    "hopping": "hopping (one foot jumping)",
    "rub two hands": "rub two hands together",
    "nausea/vomiting": "nausea or vomiting condition",
    "jump up": "jump up",
    "clapping": "clapping",
    "drop": "drop",
    "chest pain": "touch chest (stomachache/heart pain)",
    "neck pain": "touch neck (neckache)",
    "put on a hat/cap": "put on a hat/cap",
    "cheer up": "cheer up",
    "pick up": "pickup",
}


def test_paper_order_is_a_permutation_of_the_sixty_actions() -> None:
    assert len(ntu60.NTU60_ACTION_NAMES) == 60
    assert [len(task) for task in ntu60.PAPER_TASKS] == [10] * 6
    assert sorted(ntu60.PAPER_CLASS_ORDER) == list(range(60))
    assert len(ntu60.PAPER_NAME_TO_ACTION) == 60


def test_each_paper_name_maps_to_the_intended_official_action() -> None:
    names = [n for task in ntu60.PAPER_TASKS for n in task]
    assert set(names) == set(PAPER_TO_OFFICIAL_NAME)
    for name in names:
        action = ntu60.PAPER_NAME_TO_ACTION[name]
        assert ntu60.NTU60_ACTION_NAMES[action - 1] == PAPER_TO_OFFICIAL_NAME[name], name
    # Spot checks against the official numbering of the NTU README.
    assert ntu60.PAPER_NAME_TO_ACTION["put on glasses"] == 18
    assert ntu60.PAPER_NAME_TO_ACTION["kicking"] == 51
    assert ntu60.PAPER_NAME_TO_ACTION["kicking something"] == 24
    assert ntu60.PAPER_CLASS_ORDER[:3] == (17, 39, 42)


def test_charon_xder_perm_read_as_an_order_is_the_paper_order() -> None:
    """An independent source: CHARON's published list equals the order built from the names."""
    assert ntu60.CHARON_XDER_PERM == ntu60.PAPER_CLASS_ORDER
    # CHARON applies it as new_label = xder_perm[action - 1]: the inverse order.
    order = ntu60.CHARON_CLASS_ORDER
    assert all(ntu60.CHARON_XDER_PERM[order[i]] == i for i in range(60))


# ---------------------------------------------------------------------------------------------
# The benchmark


def test_benchmark_in_the_paper_order(converted) -> None:
    root, _ = converted
    bench = load_benchmark("seq-ntu60", root)
    assert bench.train_x.dtype == torch.float16
    assert bench.train_x.shape == (2, 3, 9, 25, 2)
    assert bench.input_shape == (3, 9, 25, 2)
    assert (bench.n_tasks, bench.classes_per_task) == (6, (10,) * 6)
    assert bench.class_order == ntu60.PAPER_CLASS_ORDER  # official action id - 1 of each class
    assert bench.class_names[:3] == ("wear on glasses", "cross hands in front (say stop)", "falling")
    assert bench.class_names == tuple(ntu60.NTU60_ACTION_NAMES[a] for a in ntu60.PAPER_CLASS_ORDER)
    # A (action 18, "put on glasses") is class 0; C (60, "walking apart") is task 4's 9th, class
    # 38; B (50, "punch/slap") is task 1's 8th, class 7.
    assert bench.train_y.tolist() == [0, 38]
    assert bench.test_y.tolist() == [7]
    assert bench.task(0).train.tolist() == [0]
    assert bench.task(0).test.tolist() == [0]
    assert bench.task(3).train.tolist() == [1]
    assert bench.task(3).class_start == 30
    assert [bench.task(t).train.numel() for t in range(6)] == [1, 0, 0, 1, 0, 0]
    stored = _read(root / "ntu60" / "xsub.h5")["train"]["data"]
    torch.testing.assert_close(bench.train_x.float(), torch.from_numpy(stored), atol=4e-3, rtol=1e-3)


def test_benchmark_label_orders(converted) -> None:
    root, _ = converted
    official = load_benchmark("seq-ntu60", root, label_order="official")
    assert official.train_y.tolist() == [17, 59]
    assert official.class_names == ntu60.NTU60_ACTION_NAMES
    charon = load_benchmark("seq-ntu60", root, label_order="charon")
    perm = ntu60.CHARON_XDER_PERM
    assert charon.train_y.tolist() == [perm[17], perm[59]]
    assert charon.test_y.tolist() == [perm[49]]
    assert official.class_order == tuple(range(60))
    reversed_order = load_benchmark("seq-ntu60", root, class_order="reversed")
    assert reversed_order.train_y.tolist() == [59, 21]
    assert reversed_order.class_order == tuple(reversed(ntu60.PAPER_CLASS_ORDER))


def test_benchmark_transforms_and_protocol(converted) -> None:
    root, _ = converted
    bench = load_benchmark("seq-ntu60", root)
    g = torch.Generator().manual_seed(0)
    for transform in (bench.train_transform, bench.strong_transform):
        out = transform(bench.train_x, g)
        assert out.dtype == torch.float32
        assert out.shape == bench.train_x.shape
        absent = (bench.train_x == 0).all(dim=1, keepdim=True).expand_as(out)
        assert absent.any()
        assert torch.count_nonzero(out[absent]) == 0
    test_view = bench.test_transform(bench.test_x)
    assert torch.equal(test_view[:, :, 0, 1, 0], torch.zeros(1, 3))  # first-frame mid-spine at 0
    defaults = benchmark_defaults("seq-ntu60")
    assert defaults is bench.defaults
    assert (defaults.epochs, defaults.batch_size, defaults.minibatch_size, defaults.lr) == (70, 32, 32, 0.1)
    assert (defaults.momentum, defaults.lr_schedule, defaults.warmup_epochs) == (0.9, "cosine", 10)
    assert (defaults.buffer_size, defaults.backbone, defaults.backbone_options) == (
        500,
        "efficientgcn-b0",
        {},
    )
    assert pickle.loads(pickle.dumps(bench)).train_x.shape == bench.train_x.shape  # no h5py handle inside


def _write_layout(path: Path, **changes) -> None:
    """A valid 1+1-sample file, with ``changes`` = {"split/key": array or None (deleted)}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    content = {
        f"{split}/{key}": value
        for split in ("train", "test")
        for key, value in (
            ("data", np.ones((1, 3, 4, 25, 2), np.float32)),
            ("label", np.zeros(1, np.int64)),
            ("length", np.full(1, 4, np.int32)),
            ("name", np.array([b"S001C001P001R001A001"], "S20")),
        )
    }
    content.update(changes)
    with h5py.File(path, "w") as f:
        for key, value in content.items():
            if value is not None:
                f[key] = value
        f.attrs["layout"] = "CTVM"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"test/label": None}, "dataset 'test/label' missing"),
        ({"train/data": np.ones((1, 3, 4, 25, 1), np.float32)}, r"'train/data' has shape \(1, 3, 4, 25, 1\)"),
        ({"train/data": np.ones((1, 3, 4, 25, 2), np.int32)}, "'train/data' has dtype int32"),
        ({"train/label": np.zeros(2, np.int64)}, r"'train/label' has shape \(2,\), expected \(1,\)"),
        ({"test/label": np.array([60], np.int64)}, "'test/label' row 0 is 60, expected 0..59"),
        ({"train/name": np.array([1.0])}, "'train/name' has dtype float64"),
        ({"test/data": np.ones((1, 3, 5, 25, 2), np.float32)}, "train and test hold 4 and 5 frames"),
    ],
)
def test_wrong_layouts_raise_one_line(tmp_path, changes, message) -> None:
    _write_layout(tmp_path / "ntu60" / "xsub.h5", **changes)
    with pytest.raises(BenchmarkFormatError, match=message) as info:
        load_benchmark("seq-ntu60", tmp_path)
    assert str(info.value).startswith(str(tmp_path / "ntu60" / "xsub.h5"))
    assert "\n" not in str(info.value)


def test_valid_handmade_layout_loads(tmp_path) -> None:
    _write_layout(tmp_path / "ntu60" / "xsub.h5")
    bench = load_benchmark("seq-ntu60", tmp_path, label_order="official")
    assert bench.train_x.shape == (1, 3, 4, 25, 2)
    assert bench.train_y.tolist() == [0]


def test_missing_or_unreadable_files(tmp_path) -> None:
    with pytest.raises(DataNotFoundError, match=r"prepare_data\('ntu60', 'ROOT', source='DIR'\)"):
        load_benchmark("seq-ntu60", tmp_path)
    with pytest.raises(DataNotFoundError, match="needs a data root"):
        load_benchmark("seq-ntu60")
    (tmp_path / "ntu60").mkdir()
    (tmp_path / "ntu60" / "xsub.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(BenchmarkFormatError, match="not a readable HDF5 file") as info:
        load_benchmark("seq-ntu60", tmp_path)
    assert "\n" not in str(info.value)
    with h5py.File(tmp_path / "ntu60" / "xsub.h5", "w") as f:
        f.create_group("validation")
    with pytest.raises(BenchmarkFormatError, match="group 'train' missing"):
        load_benchmark("seq-ntu60", tmp_path)
