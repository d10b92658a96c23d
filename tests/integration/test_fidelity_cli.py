"""The fidelity flags reach the library from the command line (issue 16): each flag's
choice is recorded in the JSON, and the default and the named alternative give
different records. The maths behind each flag is tested in test_fidelity_*.py; these
run on the tiny checkpoint so that they stay fast."""

from __future__ import annotations

import json

from headscope.cli import main
from headscope.layer0.neurons import VARIANTS


def run_json(capsys, *argv) -> dict:
    capsys.readouterr()
    code = main([str(a) for a in argv] + ["--json"])
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.err, out.err
    return json.loads(out.out)


def test_neurons_variant_and_robust_rank(tiny_hf_dir, capsys):
    d = run_json(capsys, "neurons", tiny_hf_dir, "--threshold", "0", "--top", "3")
    assert "variant" not in d and "ranking" not in d                         # the default: today's scan
    v = run_json(capsys, "neurons", tiny_hf_dir, "--threshold", "0", "--top", "3", "--heads", "0,2",
                 "--variant", "code,glitch=exclude,position=20", "--rank", "robust", "--k", "4")
    assert v["heads"] == [0, 2] and v["position"] == 20
    assert v["variant"]["spec"] == "computation=code,pos=without,ln2=none,max=abs,glitch=exclude,position=20"
    assert v["variant"]["position_part"] is VARIANTS["code"].position_part is False
    assert all(n["score"] == max(n["max_contribution"], -n["min_contribution"]) for n in v["neurons"])  # max |·|
    r = v["ranking"]
    assert r["k"] == 4 and r["variant"]["spec"] == v["variant"]["spec"]
    assert sorted(r["order_robust"]) == sorted(r["order_max"]) == list(range(20))
    assert [n["neuron"] for n in r["neurons"]] == r["order_robust"]


def test_kernels_rule(tiny_hf_dir, capsys):
    shape = run_json(capsys, "kernels", tiny_hf_dir)
    width = run_json(capsys, "kernels", tiny_hf_dir, "--rule", "width")
    assert shape["rule"]["name"] == "shape" and width["rule"]["name"] == "width"
    for d, key in ((shape, "category_shape"), (width, "category_width")):
        assert all(h["category"] == h[key] for h in d["heads"])               # the category follows the rule


def test_survey_preset_and_bos_query(tiny_hf_dir, capsys):
    ours = run_json(capsys, "survey", tiny_hf_dir)["prompts"]
    seed = run_json(capsys, "survey", tiny_hf_dir, "--preset", "seed")["prompts"]
    assert ours["preset"] == "headscope" and ours["bos_query_in_loss"] is False and ours["n_prompts"] > 1
    # one prompt as long as the context allows (the authors' 255 words need n_ctx ≥ 256)
    assert seed["preset"] == "seed" and seed["bos_query_in_loss"] is True and seed["n_prompts"] == 1
    assert seed["length"] == 39
    excl = run_json(capsys, "survey", tiny_hf_dir, "--preset", "seed", "--bos-query", "exclude")["prompts"]
    assert excl["bos_query_in_loss"] is False


def test_head_preset(tiny_hf_dir, capsys):
    seed = run_json(capsys, "head", tiny_hf_dir, "1.2", "--preset", "seed")["graph"]
    assert seed == {**seed, "preset": "seed", "graph": "authors", "frequency": "wordfreq", "attn_mean": "authors",
                    "k": 4, "n_nodes": 3000, "max_comm_size": 512}
    mixed = run_json(capsys, "head", tiny_hf_dir, "1.2", "--preset", "seed", "--attn-mean", "prompts",
                     "--k", "6", "--tokens", "500")["graph"]
    assert mixed["attn_mean"] == "prompts" and mixed["k"] == 6 and mixed["graph"] == "authors"
    assert mixed["n_frequent"] == 500
