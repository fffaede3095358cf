"""The data pickles' reader builds only data (:mod:`xder_data._pickle`): a planted pickle that
would run code is refused, through every reader that opens one, and nothing it names runs."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from xder_data import UnsafePickleError, load_benchmark
from xder_data._pickle import load_data_pickle
from xder_data.miniimagenet import import_miniimagenet_pickle
from xder_data.ntu60 import import_ntu60_stgcn


def planted(module: str, name: str, *args: str | int) -> bytes:
    """A protocol-0 pickle calling ``module.name(*args)`` as it loads (GLOBAL, then REDUCE)."""
    ops = "".join(f"S'{a}'\n" if isinstance(a, str) else f"I{a}\n" for a in args)
    return f"c{module}\n{name}\n({ops}tR.".encode()


def nested(payload: bytes) -> bytes:
    """``{"data": <an array>, "labels": <payload>}``: the call hidden inside real-looking data."""
    head = pickle.dumps({"data": np.arange(4, dtype=np.uint8)}, protocol=0)
    assert head.endswith(b"s.")  # SETITEM, STOP: add one more item before the STOP
    return head[:-1] + b"S'labels'\n" + payload[:-1] + b"s."


def payloads(marker: Path) -> dict[str, bytes]:
    """Each would create ``marker`` (or ``marker.npy``) when unpickled."""
    touch = f"touch {marker}"
    return {
        "os.system": planted("os", "system", touch),
        "posix.system": planted("posix", "system", touch),
        "subprocess.getoutput": planted("subprocess", "getoutput", touch),
        "builtins.eval": planted("builtins", "eval", f"open(r'{marker}', 'w').close()"),
        "builtins.exec (Python 2 name)": planted("__builtin__", "exec", f"open(r'{marker}', 'w').close()"),
        "numpy.save": planted("numpy", "save", str(marker), 0),
        "torch.save": planted("torch", "save", 0, str(marker)),
        "nested in a dict": nested(planted("os", "system", touch)),
    }


def ran(marker: Path) -> bool:
    return marker.exists() or Path(f"{marker}.npy").exists()  # numpy.save appends .npy


def test_the_payloads_are_live(tmp_path: Path) -> None:
    # What pickle.load itself would do with them: the refusals below refuse something real.
    for label in ("os.system", "numpy.save", "nested in a dict"):
        marker = tmp_path / f"ran-{label.replace(' ', '-')}"
        pickle.loads(payloads(marker)[label])
        assert ran(marker), label


@pytest.mark.parametrize("label", list(payloads(Path("x"))))
def test_a_planted_pickle_is_refused_and_nothing_runs(tmp_path: Path, label: str) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "data_batch_1"
    path.write_bytes(payloads(marker)[label])
    with pytest.raises(UnsafePickleError) as error:
        load_data_pickle(path)
    assert not ran(marker)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: refused: the pickle would load ")


def test_protocol_two_bytes_decode_and_other_codecs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.pkl"
    path.write_bytes(pickle.dumps({"k": b"\x00\xffbytes"}, protocol=2))  # bytes via _codecs.encode
    assert load_data_pickle(path) == {"k": b"\x00\xffbytes"}
    path.write_bytes(b"c_codecs\nencode\n(S'print(1)'\nS'rot13'\ntR.")
    with pytest.raises(pickle.UnpicklingError, match="rot13"):
        load_data_pickle(path)


def test_every_protocol_of_the_formats_data_reads_back(tmp_path: Path) -> None:
    data = {
        b"data": np.arange(24, dtype=np.uint8).reshape(2, 12),
        "labels": [np.int64(3), 1],
        "filenames": ["a.png", b"b.png"],
        "shape": (2, 12),
        "mean": np.float32(0.5),
    }
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        path = tmp_path / f"p{protocol}.pkl"
        path.write_bytes(pickle.dumps(data, protocol=protocol))
        back = load_data_pickle(path)
        assert np.array_equal(back[b"data"], data[b"data"])
        assert back[b"data"].dtype == np.uint8
        assert [back["labels"], back["filenames"], back["shape"], back["mean"]] == [
            [3, 1],
            ["a.png", b"b.png"],
            (2, 12),
            0.5,
        ]


def test_the_cifar_readers_refuse_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for dataset, folder, names in (
        ("seq-cifar10", "cifar-10-batches-py", [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]),
        ("seq-cifar100", "cifar-100-python", ["train", "test"]),
    ):
        root = tmp_path / dataset
        (root / folder).mkdir(parents=True)
        for name in [*names, "batches.meta", "meta"]:
            (root / folder / name).write_bytes(payloads(marker)["os.system"])
        with pytest.raises(UnsafePickleError, match=r"refused: the pickle would load os\.system"):
            load_benchmark(dataset, root)
        assert not ran(marker)


def test_the_miniimagenet_cache_importer_refuses_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = tmp_path / "source"
    source.mkdir()
    for split in ("train", "val", "test"):
        (source / f"mini-imagenet-cache-{split}.pkl").write_bytes(payloads(marker)["numpy.save"])
    with pytest.raises(UnsafePickleError, match=r"numpy\.save"):
        import_miniimagenet_pickle(source, tmp_path / "root")
    assert not ran(marker)
    assert not (tmp_path / "root" / "MINIIMG").exists()


def test_the_ntu_label_reader_refuses_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    folder = tmp_path / "NTU-RGB-D" / "xsub"
    folder.mkdir(parents=True)
    for part in ("train", "val"):
        np.save(folder / f"{part}_data.npy", np.zeros((1, 3, 8, 25, 2), np.float32))
        (folder / f"{part}_label.pkl").write_bytes(payloads(marker)["builtins.eval"])
    with pytest.raises(UnsafePickleError, match=r"builtins\.eval"):
        import_ntu60_stgcn(folder.parent, tmp_path / "root", num_frames=8)
    assert not ran(marker)
    assert not (tmp_path / "root" / "ntu60").exists()
