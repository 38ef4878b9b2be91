"""The workload registry: the packaged models.yaml, validation errors with file and line, select()."""

from __future__ import annotations

import re
import textwrap

import pytest

from memprobe.core.workload.registry import FAMILIES, OPTIMIZERS, UNITS, RegistryError, Workload, load_registry, select

GOOD_ENTRY = """\
  family: toy-mlp
  unit: samples
  optimizer: {name: sgd}
"""


def write(tmp_path, text: str, name: str = "models.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def one_line(message: str) -> bool:
    return "\n" not in message.strip()


# --- the packaged registry -------------------------------------------------------------------


def test_packaged_registry_loads(packaged_models):
    registry = load_registry()
    assert list(registry) == list(load_registry(packaged_models))
    for name in ("bert-large", "toy"):
        assert name in registry
        w = registry[name]
        assert isinstance(w, Workload)
        assert w.name == name
        assert w.family in FAMILIES
        assert w.unit in UNITS
        assert w.optimizer["name"] in OPTIMIZERS
        assert w.description
    assert registry["bert-large"].family == "bert-pretraining"
    assert registry["bert-large"].unit == "sequences"
    assert registry["bert-large"].optimizer["name"] == "adamw"
    assert registry["bert-large"].params["seq_len"] == 512
    assert registry["bert-large"].test_only is False
    assert registry["toy"].family == "toy-mlp"
    assert registry["toy"].unit == "samples"
    assert registry["toy"].test_only is True


def test_workload_to_dict_is_what_result_files_store():
    w = load_registry()["bert-large"]
    d = w.to_dict()
    assert d["name"] == "bert-large" and d["family"] == "bert-pretraining" and d["version"] == 1
    assert d["params"] == w.params and d["optimizer"] == w.optimizer
    d["params"]["layers"] = 1  # a copy: changing it does not change the workload
    assert w.params["layers"] == 24


def test_valid_file_keeps_order_and_defaults(tmp_path):
    a = textwrap.dedent("""\
        a:
          family: bert-pretraining
          unit: sequences
          optimizer: {name: adam, lr: 0.1}
          params: {layers: 2}
          test_only: true
          version: 3
        """)
    path = write(tmp_path, "b:\n" + GOOD_ENTRY + a)
    registry = load_registry(path)
    assert list(registry) == ["b", "a"]
    assert registry["b"].params == {} and registry["b"].version == 1 and registry["b"].test_only is False
    assert registry["a"].version == 3 and registry["a"].test_only is True and registry["a"].params == {"layers": 2}


# --- errors: file, entry, line -------------------------------------------------------------


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = write(
        tmp_path,
        """\
        good:
          family: toy-mlp
          unit: samples
          params: {features: 64
          optimizer: {name: sgd}
        """,
        name="broken-models.yaml",
    )
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    message = str(info.value)
    assert "broken-models.yaml" in message
    assert "malformed YAML" in message
    match = re.search(r"line (\d+)", message)
    assert match, message
    assert 4 <= int(match.group(1)) <= 5  # the unclosed mapping opens on line 4 and breaks on 5
    assert one_line(message)


def test_tab_indentation_is_malformed_with_line(tmp_path):
    path = write(tmp_path, "a:\n  family: toy-mlp\n\tunit: samples\n")
    with pytest.raises(RegistryError, match=r"models\.yaml.*line 3.*malformed YAML"):
        load_registry(path)


def test_unknown_family_names_entry_and_line(tmp_path):
    path = write(
        tmp_path,
        """\
        fine:
          family: toy-mlp
          unit: samples
          optimizer: {name: sgd}
        # a comment
        resnet-9000:
          family: imaginary-net
          unit: images
          optimizer: {name: sgd}
        """,
    )
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    message = str(info.value)
    assert str(path) in message
    assert "resnet-9000" in message
    assert "line 6" in message
    assert "imaginary-net" in message
    assert "toy-mlp" in message  # lists the known families
    assert one_line(message)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("  family: toy-mlp\n  unit: parsecs\n  optimizer: {name: sgd}\n", r"unit must be one of .*parsecs"),
        ("  family: toy-mlp\n  unit: samples\n", r"optimizer must be a mapping"),
        ("  family: toy-mlp\n  unit: samples\n  optimizer: {name: lion}\n", r"optimizer must be a mapping whose name"),
        ("  family: toy-mlp\n  unit: samples\n  optimizer: [sgd]\n", r"optimizer must be a mapping"),
        ("  family: toy-mlp\n  unit: samples\n  optimizer: {name: sgd}\n  colour: red\n", r"unknown key\(s\) colour"),
        (
            "  family: toy-mlp\n  unit: samples\n  optimizer: {name: sgd}\n  params: [1, 2]\n",
            r"params must be a mapping",
        ),
        (
            "  family: toy-mlp\n  unit: samples\n  optimizer: {name: sgd}\n  version: 'two'\n",
            r"version must be an integer",
        ),
        ("  - family\n", r"expected a mapping"),
        ("  unit: samples\n  optimizer: {name: sgd}\n", r"unknown family 'None'"),
    ],
)
def test_entry_errors_name_file_entry_and_line(tmp_path, body, expected):
    path = write(tmp_path, "ok:\n" + GOOD_ENTRY + "\nbad-one:\n" + body, name="my-registry.yaml")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    message = str(info.value)
    assert re.search(expected, message), message
    assert "my-registry.yaml" in message
    assert "entry 'bad-one' (line 6)" in message
    assert one_line(message)


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- a\n- b\n", "just a string\n"])
def test_not_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(RegistryError, match="expected a mapping of workload names"):
        load_registry(path)


def test_missing_file(tmp_path):
    with pytest.raises(RegistryError, match=r"nope\.yaml: cannot read registry"):
        load_registry(tmp_path / "nope.yaml")


def test_registry_error_is_a_value_error():
    assert issubclass(RegistryError, ValueError)


# --- select ----------------------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path):
    entries = {
        "bert-large": ("bert-pretraining", "sequences", False),
        "bert-base": ("bert-pretraining", "sequences", False),
        "resnet50": ("toy-mlp", "images", False),
        "toy": ("toy-mlp", "samples", True),
    }
    text = "".join(
        f"{n}:\n  family: {f}\n  unit: {u}\n  optimizer: {{name: sgd}}\n  test_only: {str(t).lower()}\n"
        for n, (f, u, t) in entries.items()
    )
    return load_registry(write(tmp_path, text))


def names(workloads):
    return [w.name for w in workloads]


def test_select_all_excludes_test_only(registry):
    assert names(select(registry, "all")) == ["bert-large", "bert-base", "resnet50"]


def test_select_by_name_includes_test_only(registry):
    assert names(select(registry, "toy")) == ["toy"]


def test_select_wildcards(registry):
    assert names(select(registry, "bert-*")) == ["bert-large", "bert-base"]
    assert names(select(registry, "*50")) == ["resnet50"]
    assert names(select(registry, "bert-?ase")) == ["bert-base"]


def test_select_list_deduplicates_and_keeps_order(registry):
    assert names(select(registry, "resnet50, bert-*,bert-large,,")) == ["resnet50", "bert-large", "bert-base"]
    assert names(select(registry, "toy,all")) == ["toy", "bert-large", "bert-base", "resnet50"]


def test_select_unknown_name_lists_known_names(registry):
    with pytest.raises(RegistryError) as info:
        select(registry, "bert-large,gpt-5")
    message = str(info.value)
    assert "unknown model 'gpt-5'" in message
    for known in ("bert-large", "bert-base", "resnet50"):
        assert known in message
    assert one_line(message)


def test_select_wildcard_matching_nothing_is_an_error(registry):
    with pytest.raises(RegistryError, match=r"unknown model 'vit-\*'"):
        select(registry, "vit-*")


def test_select_is_case_sensitive(registry):
    with pytest.raises(RegistryError):
        select(registry, "BERT-large")


@pytest.mark.parametrize("patterns", ["", " , ,"])
def test_select_nothing_given(registry, patterns):
    with pytest.raises(RegistryError, match="no model given"):
        select(registry, patterns)


def test_non_string_entry_name_still_gets_its_line(tmp_path):
    # YAML reads `2020:` as an integer key; the error must still say where the entry is.
    path = write(
        tmp_path, "ok:\n" + GOOD_ENTRY + "\n2020:\n  family: nope\n  unit: samples\n  optimizer: {name: sgd}\n"
    )
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert "entry '2020' (line 6)" in str(info.value)


def test_a_workload_comes_back_from_its_dict():
    from memprobe.core.workload.registry import Workload, load_registry

    for workload in load_registry().values():
        back = Workload.from_dict(workload.to_dict())
        assert back.to_dict() == workload.to_dict() and back.unit == workload.unit
