"""Card names as people type them: case-insensitive, short names and aliases resolved to catalog cards, an
ambiguous name taken as the common card with a note naming the others, typos answered with the closest names,
junk refused. One resolver for predict and guide."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.cards.cardnames import CardNameError, closest_names, resolve_card, resolve_cards
from memprobe.core.cards.cardsize import SizeError, read_sizes
from memprobe.core.cards.catalog import CatalogError, default_catalog, load_catalog


@pytest.mark.parametrize(
    "name, card",
    [
        ("H200", "H200 SXM"),
        ("h200", "H200 SXM"),
        ("NVIDIA H200", "H200 SXM"),
        ("  h200 sxm ", "H200 SXM"),
        ("h100 sxm", "H100 SXM"),
        ("H100 SXM5", "H100 SXM"),
        ("h100sxm", "H100 SXM"),
        ("h100 pcie", "H100 PCIe"),
        ("4090", "GeForce RTX 4090"),
        ("RTX 4090", "GeForce RTX 4090"),
        ("nvidia geforce rtx 4090", "GeForce RTX 4090"),
        ("3090", "GeForce RTX 3090"),
        ("2080", "GeForce RTX 2080"),
        ("2080 Ti", "GeForce RTX 2080 Ti"),
        ("2080ti", "GeForce RTX 2080 Ti"),
        ("gtx 1080 ti", "GeForce GTX 1080 Ti"),
        ("a6000", "RTX A6000"),
        ("A100-SXM4-80GB", "A100 80GB SXM4"),
        ("a100 80 GB sxm4", "A100 80GB SXM4"),
        ("v100 32gb", "V100 SXM2 32GB"),
        ("V100 PCIe", "V100 PCIe 16GB"),
        ("a10", "A10"),
        ("L4", "L4"),
        ("l40s", "L40S"),
        ("gh200", "GH200 96GB"),
        ("b200", "B200"),
        ("quadro rtx 6000", "Quadro RTX 6000"),
        ("titan rtx", "TITAN RTX"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ],
)
def test_names_people_type_resolve_without_a_note(name, card):
    found = resolve_card(name)
    assert found.card.name == card and found.note == ""


@pytest.mark.parametrize(
    "name, card, others",
    [
        ("H100", "H100 SXM", ["H100 PCIe"]),
        ("h100 80gb", "H100 SXM", ["H100 PCIe"]),
        ("A100", "A100 80GB SXM4", ["A100 40GB PCIe", "A100 40GB SXM4", "A100 80GB PCIe"]),
        ("a100 80gb", "A100 80GB SXM4", ["A100 80GB PCIe"]),
        ("A100 40GB", "A100 40GB SXM4", ["A100 40GB PCIe"]),
        ("V100", "V100 SXM2 16GB", ["V100 SXM2 32GB", "V100 PCIe 16GB"]),
        ("rtx 6000", "RTX 6000 Ada", ["Quadro RTX 6000"]),
    ],
)
def test_an_ambiguous_name_is_the_common_card_with_a_note_naming_the_others(name, card, others):
    found = resolve_card(name)
    assert found.card.name == card
    assert all(o in found.note for o in others) and card in found.note


@pytest.mark.parametrize(
    "name, closest",
    [
        ("H900", "H100 SXM"),
        ("l40", "L40S"),
        ("a10g", "A10"),
        ("RTX 4080", "GeForce RTX 4090"),
    ],
)
def test_a_typo_gets_the_three_closest_names(name, closest):
    with pytest.raises(CardNameError, match=f"unknown GPU '{name}'; closest catalog names: ") as info:
        resolve_card(name)
    listed = str(info.value).split("closest catalog names: ")[1].split(" (")[0].split(", ")
    assert len(listed) == 3 and closest in listed
    assert closest_names(name, default_catalog())[:3] == listed


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("H200 foo", "unknown GPU 'H200 foo'"),  # extra words: not quietly the H200
        ("H200 \N{SNOWMAN}", "is not a card name"),
        ("H200\x00", "is not a card name"),
        ("", "empty card name"),
        ("   ", "empty card name"),
        ("nvidia", "names no card"),
        ("--", "names no card"),
    ],
)
def test_junk_is_refused(name, fragment):
    with pytest.raises(CardNameError, match=fragment):
        resolve_card(name)


def test_a_long_name_is_quoted_shortened():
    with pytest.raises(CardNameError) as info:
        resolve_card("x" * 5000)
    assert len(str(info.value)) < 300


def test_a_list_resolves_each_once_and_refuses_an_empty_list():
    assert [r.card.name for r in resolve_cards("H200, h200 sxm,4090")] == ["H200 SXM", "GeForce RTX 4090"]
    assert resolve_cards(None) == []
    for empty in ("", ",", " , "):
        with pytest.raises(CardNameError, match="no card name given"):
            resolve_cards(empty)


def test_a_name_that_fits_several_unpreferred_cards_is_refused(tmp_path):
    path = tmp_path / "gpus.yaml"
    card = "{name: %s, memory_gib: 8, compute_capability: '8.0', spec_source: s, peak_source: s}"
    path.write_text(f"cards:\n  - {card % 'Foo 8GB'}\n  - {card % 'Foo 16GB'}\n")
    with pytest.raises(CardNameError, match="fits several cards"):
        resolve_card("foo", load_catalog(path))


def test_preferred_must_name_catalog_cards(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "preferred: [Nope]\ncards:\n  - {name: X, memory_gib: 8, compute_capability: '8.0', "
        "spec_source: s, peak_source: s}\n"
    )
    with pytest.raises(CatalogError, match="'preferred' names no card Nope"):
        load_catalog(path)


def test_predict_sizes_use_the_resolver_and_say_the_note():
    sizes = read_sizes(None, "a100 80gb")
    assert [label for label, _ in sizes.labels] == ["A100 80GB SXM4"]
    assert any("A100 80GB PCIe" in n for n in sizes.notes)
    with pytest.raises(SizeError) as info:
        read_sizes(None, "")
    assert info.value.option == "--gpu"  # not an error about --memory


@pytest.mark.parametrize("command", [["guide"], ["predict", "--model", "toy"], ["plan", "--model", "toy"]])
@pytest.mark.parametrize(
    "gpu, fragment",
    [
        ("", "no card name given"),
        ("H200 foo", "unknown GPU 'H200 foo'"),
        ("H200 \N{SNOWMAN}", "is not a card name"),
    ],
)
def test_the_commands_share_the_resolver(command, gpu, fragment):
    result = CliRunner().invoke(main, command + ["--gpu", gpu])
    # a name memprobe cannot read is a bad name: exit 1 in every command (README's exit codes), --gpu named
    assert result.exit_code == 1 and fragment in result.output and "--gpu" in result.output
    assert "--memory" not in result.output.splitlines()[-1]


def test_guide_says_how_an_ambiguous_name_was_taken():
    result = CliRunner().invoke(main, ["guide", "--gpu", "H100"])
    assert result.exit_code == 0, result.output
    assert "note: 'H100' taken as the H100 SXM" in result.output and "H100 PCIe" in result.output


def _card_cells(output: str) -> dict[tuple[str, str], str]:
    """(precision, card) -> cell from predict's tables, however many tables the width split them into."""
    cells: dict[tuple[str, str], str] = {}
    headers: list[str] = []
    for line in output.splitlines():
        if not line.startswith("| "):
            continue
        row = [cell.strip() for cell in line.strip("|").split("|")]
        if row[0] == "precision":
            headers = row
        else:
            for header, cell in zip(headers, row, strict=True):
                if header.endswith(": predicted max batch"):
                    cells[row[0], header.removesuffix(": predicted max batch")] = cell
    return cells


def test_predict_gives_no_max_batch_for_a_precision_the_card_cannot_train(run):
    # plan leaves bf16 out on a V100 (compute capability 7.0); predict shows "-" and says why, not a number
    result = run("predict", "--model", "toy", "--gpu", "V100,H100", "-p", "bf16,fp32")
    assert result.exit_code == 0, result.output
    cells = _card_cells(result.stdout)
    number = re.compile(r"\d+(\+ \(cap\))?")  # toy fits an H100 past predict's search cap: "65536+ (cap)"
    assert cells["bf16", "V100 SXM2 16GB"] == "-" and number.fullmatch(cells["bf16", "H100 SXM"])
    assert number.fullmatch(cells["fp32", "V100 SXM2 16GB"]) and number.fullmatch(cells["fp32", "H100 SXM"])
    assert "V100 SXM2 16GB: cannot train in bf16 (they need compute capability 8.0 or newer)" in result.stdout


@pytest.mark.parametrize(
    "typed, card",
    [("RTX4090", "GeForce RTX 4090"), ("rtx8000", "Quadro RTX 8000"), ("gtx1080ti", "GeForce GTX 1080 Ti")],
)
def test_letters_run_into_digits_still_name_the_card(typed, card):
    assert resolve_card(typed).card.name == card


@pytest.mark.parametrize("typed", ["a", "h1", "a10g", "RTX3090Ti"])
def test_splitting_letters_from_digits_accepts_no_junk(typed):
    # "a" has no digits to split; "h1" is no card's word; the 3090 Ti is not the 3090
    with pytest.raises(CardNameError, match="unknown GPU"):
        resolve_card(typed)


def test_the_api_gives_no_max_batch_for_a_precision_the_card_cannot_train_as_the_cli():
    from memprobe import predict_max_batch

    prediction = predict_max_batch("toy", memory=None, precision="bf16,fp32", gpu="V100,H100")
    assert prediction.cannot_train == {"V100 SXM2 16GB": ["bf16"]}
    assert prediction.precisions["bf16"].max_batch["V100 SXM2 16GB"] == 0
    assert prediction.precisions["bf16"].max_batch["H100 SXM"] > 0
    assert prediction.precisions["fp32"].max_batch["V100 SXM2 16GB"] > 0
