"""Experiment configs: the shipped files validate; unknown or mistyped keys are refused; overrides apply."""
import re
from pathlib import Path

import pytest
import yaml

from ibp_graph.cli import main as cli
from ibp_graph.train.config import Config, ConfigError, apply_overrides, describe, from_dict, load_config, to_dict

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_the_five_configs_are_shipped():
    assert {p.stem for p in CONFIGS} >= {"default", "papers100m", "products", "arxiv", "bench"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_validate_and_round_trip(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config) and cfg.name == path.stem
    assert from_dict(Config, to_dict(cfg)) == cfg
    raw = yaml.safe_load(path.read_text())
    assert raw["data"]["name"] == cfg.data.name  # nothing silently renamed


def test_default_experiment_is_the_make_train_one():
    cfg = load_config(CONFIGS[[p.stem for p in CONFIGS].index("default")])
    assert cfg.data.name == "synthetic" and cfg.loader.codecs == ["auto"] and cfg.model.arch == "sage"
    assert load_config(CONFIGS[[p.stem for p in CONFIGS].index("bench")]).loader.codecs == ["ibp", "identity"]


def test_codecs_default_to_auto_and_accept_every_codec_name():
    assert Config().loader.codecs == ["auto"]
    cfg = load_config(None, ["loader.codecs=[auto, ibp, ebp, identity]"])
    assert cfg.loader.codecs == ["auto", "ibp", "ebp", "identity"]
    for path in CONFIGS:  # the shipped experiments use auto unless they compare codecs on purpose
        codecs = load_config(path).loader.codecs
        assert codecs == ["auto"] or path.stem == "bench", (path.stem, codecs)


def test_unknown_keys_are_refused_with_the_valid_ones(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nloader:\n  batch_sise: 10\n")
    with pytest.raises(ConfigError, match=r"unknown key loader\.batch_sise .*valid keys: batch_size, eval_batch_size"):
        load_config(bad)
    with pytest.raises(ConfigError, match="unknown key optimizer in the config; valid keys: name, data, loader"):
        load_config(None, ["optimizer.lr=1"])
    with pytest.raises(ConfigError, match=r"unknown key data\.synthetic\.nodes .*valid keys: num_nodes"):
        load_config(None, ["data.synthetic.nodes=5"])


@pytest.mark.parametrize("override, message", [
    ("loader.batch_size=abc", "loader.batch_size='abc' is not accepted; expected an integer"),
    ("loader.batch_size=true", "expected an integer"),
    ("loader.batch_size=0", "expected a value in [1, 2147483647]"),
    ("train.lr=fast", "train.lr='fast' is not accepted; expected a number"),
    ("model.arch=mlp", "choose from ['sage', 'gcn', 'gat']"),
    ("loader.codecs=[ibp, zstd]", "loader.codecs[1]='zstd' is not accepted"),
    ("loader.codecs=[zstd]", "choose from ['auto', 'ibp', 'ebp', 'identity']"),
    ("loader.num_neighbors=[10, x]", "loader.num_neighbors[1]='x' is not accepted; expected an integer"),
    ("data.store=yes please", "expected true or false"),
    ("data.synthetic.homophily=2", "homophily=2.0 is not accepted"),
    ("loader=4", "loader must be a mapping"),
    # optional keys: YAML's null named as YAML writes it (Python's None and a bare "expected an integer" before)
    ("model.norm=none", "model.norm='none' is not accepted; choose from [null, 'batch_norm', 'layer_norm']"),
    ("train.max_batches=none", "train.max_batches='none' is not accepted; expected an integer or null"),
    ("train.max_batches=0", "train.max_batches=0 is not accepted; expected a value in [1, 2147483647] or null"),
    # an optional folder: Python's None (or a quoted null) is a string in YAML, once taken as a folder named so
    ("data.prepared=None", "data.prepared='None' is a string; for no value write null unquoted"),
    ("data.shards='null'", "data.shards='null' is a string; for no value write null unquoted"),
])
def test_mistyped_values_are_refused(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


@pytest.mark.parametrize("override, message", [  # issue 19: each once a traceback, or accepted
    ("loader.num_neighbors=[100000000000000000000, 5]",
     "loader.num_neighbors[0]=100000000000000000000 is not accepted; expected an integer >= 1, or -1"),
    ("model.hidden=1000000000000", "model.hidden=1000000000000 is not accepted; expected a value in [1, 65536]"),
    ("loader.batch_size=4294967296", "expected a value in [1, 2147483647]"),
    ("train.lr=.inf", "train.lr=inf is not accepted; expected a finite number in (0.0, 1000.0]"),
    ("train.lr=inf", "train.lr='inf' is not accepted; expected a number in (0.0, 1000.0]"),
    ("train.lr=0", "train.lr=0.0 is not accepted; expected a value in (0.0, 1000.0]"),
    ("train.weight_decay=-.inf", "train.weight_decay=-inf is not accepted; expected a finite number"),
    ("model.dropout=.nan", "model.dropout=nan is not accepted; expected a finite number in [0.0, 1.0)"),
    ("model.dropout=1.0", "model.dropout=1.0 is not accepted; expected a value in [0.0, 1.0)"),
    ("data.synthetic.num_nodes=1000000000000000",
     "data.synthetic (num_nodes=1000000000000000, avg_citations=10.0, num_classes=172, dim=128) is not accepted: "
     "generating it needs at least 4.8e+16 bytes of memory"),
    ("data.synthetic.dim=100000000", "is not accepted: its files need at least 4.84e+13 bytes under data.root="),
    ("data.mag.num_authors=1000000000000000", "data.mag (num_papers=20000, num_authors=1000000000000000"),
])
def test_numbers_out_of_range_are_refused(tmp_path, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [f"data.root={tmp_path}", "data.name=synthetic-mag" if "data.mag" in override
                           else "data.name=synthetic", override])
    assert not any(tmp_path.iterdir())  # nothing generated


def test_every_number_in_the_schema_has_a_range():
    """--keys documents a range for every numeric key of the schema (the generated data's sizes
    are bounded by the memory and disk they need)."""
    lines = [ln for ln in describe() if "(an integer" in ln or "(a number" in ln]
    ours = [ln for ln in lines if not ln.startswith(("data.synthetic.", "data.mag."))]
    assert ours and all(re.search(r"\) in [\[(]", ln) for ln in ours), ours


def test_a_value_refused_names_where_it_came_from(tmp_path):
    """A refused value given by an override (--set, or a script's flag) is named as the override, not blamed on
    the config file the override goes over; one the file holds names the file."""
    path = tmp_path / "exp.yaml"
    path.write_text("train:\n  epochs: 0\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: train.epochs=0 is not accepted")):
        load_config(path)
    path.write_text("train:\n  epochs: 3\n")
    with pytest.raises(ConfigError, match=re.escape(f"the override 'train.epochs=0' (over {path}): train.epochs=0 "
                                                    "is not accepted")):
        load_config(path, ["loader.batch_size=64", "train.epochs=0"])
    with pytest.raises(ConfigError, match=r"^train.lr=-1.0 is not accepted"):  # no file: the key says it all
        load_config(None, ["train.lr=-1"])


def test_overrides_reach_any_key(tmp_path):
    cfg = load_config(None, ["loader.batch_size=2048", "loader.num_neighbors=[15,10,5]", "train.lr=1e-3",
                             "model.norm=null", "data.synthetic.num_nodes=1234", "train.max_batches=3"])
    assert cfg.loader.batch_size == 2048 and cfg.loader.num_neighbors == [15, 10, 5]
    assert cfg.train.lr == 0.001 and cfg.model.norm is None and cfg.data.synthetic.num_nodes == 1234
    assert cfg.train.max_batches == 3 and isinstance(cfg.train.lr, float)
    raw = {"loader": {"batch_size": 1}}
    assert apply_overrides(raw, ["loader.batch_size=2"]) == {"loader": {"batch_size": 2}}
    assert raw == {"loader": {"batch_size": 1}}  # the input is not modified
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides({}, ["loader.batch_size"])
    with pytest.raises(ConfigError, match="is a value, not a section"):
        apply_overrides({"name": "x"}, ["name.first=1"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_train_command_reports_config_errors(capsys):
    assert cli(["train", "--set", "loader.bogus=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown key loader.bogus" in err and "valid keys: batch_size" in err
    assert cli(["train", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "loader.batch_size (an integer, default 1024)" in out and "data.synthetic.num_nodes" in out


@pytest.mark.parametrize("text, line, key, first", [
    ("loader:\n  batch_size: 64\nloader:\n  num_workers: 0\n", 3, "loader", 1),
    ("loader:\n  batch_size: 64\n  batch_size: 128\n", 3, "batch_size", 2),
    ("loader: {batch_size: 64, batch_size: 128}\n", 1, "batch_size", 1),
])
def test_a_key_twice_in_one_mapping_is_refused_naming_it_and_its_lines(tmp_path, text, line, key, first):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"dup.yaml: line {line}: key '{key}' appears twice in one mapping \(first "
                                          rf"on line {first}\); expected each key once"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"--set 'loader=\{a: 1, a: 2\}': the value: line 1: key 'a' appears twice"):
        load_config(None, ["loader={a: 1, a: 2}"])


def test_aliases_are_read_but_a_recursive_or_exploding_one_is_refused_at_once(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("loader: &l\n  batch_size: 64\n  num_neighbors: &n [5, 5]\nmodel:\n  hidden: 32\n"
                    "train:\n  epochs: 1\n")
    assert load_config(path).loader.num_neighbors == [5, 5]
    path.write_text("loader: &n\n  batch_size: 64\n  num_neighbors: *n\n")
    with pytest.raises(ConfigError, match=r"a.yaml: line 1: the value starting here holds an alias of itself \(a "
                                          r"recursive value\)"):
        load_config(path)
    laughs = "l0: &l0 {a: 1}\n" + "".join(
        f"l{i}: &l{i} {{{', '.join(f'k{j}: *l{i - 1}' for j in range(10))}}}\n" for i in range(1, 10))
    path.write_text(laughs)  # 10**9 values once expanded, from a file of under 1 KiB
    with pytest.raises(ConfigError, match=r"a.yaml: line 6: this value expands to more than 100,000 values"):
        load_config(path)
