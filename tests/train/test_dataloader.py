"""The spawn/persistent-workers DataLoader defaults, and that explicit arguments win."""

from __future__ import annotations

import multiprocessing

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gpuwatch.train.dataloader import apply_spawn_defaults  # noqa: E402

DATA = TensorDataset(torch.arange(8.0))


@pytest.fixture
def spawn_defaults():
    before = multiprocessing.get_start_method(allow_none=True)
    original = DataLoader.__init__
    undo = apply_spawn_defaults()
    yield
    undo()
    assert DataLoader.__init__ is original
    assert multiprocessing.get_start_method(allow_none=True) == before


def _context_name(loader: DataLoader) -> str | None:
    ctx = loader.multiprocessing_context
    return None if ctx is None else ctx.get_start_method()


def test_workers_get_spawn_and_persistence(spawn_defaults):
    assert multiprocessing.get_start_method() == "spawn"
    loader = DataLoader(DATA, batch_size=2, num_workers=2)
    assert _context_name(loader) == "spawn" and loader.persistent_workers


def test_positional_num_workers_is_seen(spawn_defaults):
    loader = DataLoader(DATA, 2, False, None, None, 1)
    assert _context_name(loader) == "spawn" and loader.persistent_workers


def test_explicit_arguments_win(spawn_defaults):
    loader = DataLoader(DATA, num_workers=1, multiprocessing_context="forkserver", persistent_workers=False)
    assert _context_name(loader) == "forkserver" and not loader.persistent_workers


def test_no_workers_no_change(spawn_defaults):
    loader = DataLoader(DATA, batch_size=4)
    assert loader.multiprocessing_context is None and not loader.persistent_workers


def test_subclass_and_bad_calls(spawn_defaults):
    class Infinite(DataLoader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

    assert Infinite(DATA, num_workers=1).persistent_workers
    with pytest.raises(TypeError):
        DataLoader(DATA, no_such_argument=1)


def test_spawned_workers_load_data(spawn_defaults):
    loader = DataLoader(DATA, batch_size=4, num_workers=1)
    assert sorted(torch.cat([b[0] for b in loader]).tolist()) == list(range(8))
