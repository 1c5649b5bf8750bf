"""A backend opcov knows but has no data for (TorchNeuron today) is a row of its own in 'opcov check',
"no data yet", with the commands that would fill it, beside the other backends' verdicts; a gate that
asks for evidence fails on it; a name opcov does not know is still a one-line error."""

import json

from conftest import opcov_here


def test_a_known_backend_without_data_is_a_row_that_says_how_to_fill_it():
    r = opcov_here("check", "llama", "-b", "tpu", "-b", "neuron", "--mode", "inference")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[3:5]}
    assert rows["neuron"][2] == "no_data_yet" and rows["tpu"][2] == "runs", r.stdout
    assert "neuron (inference): NO DATA YET" in r.stdout
    scan, probe = "'opcov scan neuron --import torch_neuronx'", "'opcov probe neuron --import torch_neuronx'"
    assert scan in r.stdout and probe in r.stdout and "torch-neuronx" in r.stdout  # the record's data_commands
    out = json.loads(opcov_here("check", "llama", "-b", "neuron", "--mode", "inference", "--format", "json").stdout)
    (v,) = out["verdicts"]
    assert v["verdict"] == "unknown" and v["evidence"] == "none" and v["says"] == "no data yet" and not v["ops"]
    assert v["no_data"].startswith(scan)


def test_a_gate_asking_for_evidence_fails_on_no_data():
    for flags in (["--strict"], ["--fail-on", "unknown"], ["--require", "registered"]):
        r = opcov_here("check", "llama", "-b", "neuron", "--mode", "inference", *flags)
        assert r.returncode == 1 and "neuron (inference): no data yet" in r.stderr, (flags, r.stderr)


def test_an_unknown_backend_name_is_still_an_error():
    r = opcov_here("check", "llama", "-b", "neuronn", "--mode", "inference")
    assert r.returncode == 2 and "did you mean 'neuron'" in r.stderr and r.stderr.count("\n") == 1, r.stderr
