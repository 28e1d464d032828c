"""Tiny experiments for the training tests: a config from a list of --set overrides, and a generated data set
made once per test module."""
from ibp_graph.train.config import load_config


def config(tiny: list, root, out=None, *extra: str):
    """The checked config of overrides `tiny` with data under `root` (and results under `out`), plus `extra`."""
    return load_config(None, tiny + [f"data.root={root}"] + ([f"output.dir={out}"] if out is not None else [])
                       + list(extra))


def generated_root(tmp_path_factory, tiny: list, ensure):
    """A fresh data root holding the data set `ensure(cfg.data)` generates for `tiny` (`ensure(data, root)`)."""
    root = tmp_path_factory.mktemp("data")
    ensure(config(tiny, root).data, root)
    return root
