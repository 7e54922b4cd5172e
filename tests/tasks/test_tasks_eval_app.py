"""``rescue eval-tasks``: the Hydra app and its config."""

from __future__ import annotations

import json
import sys

import pytest
from omegaconf import OmegaConf

from rescue_env.experiments import eval_tasks
from rescue_env.tasks.predictors import AgentPredictor, check_agent_groups


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from rescue_env.experiments.config import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="eval_tasks", overrides=overrides)


def test_config_loads_without_the_cli():
    cfg = _compose(["predictor=prior", "profile=released", "tasks=[itp,stp]"])
    assert cfg.predictor == "prior" and cfg.profile == "released" and list(cfg.tasks) == ["itp", "stp"]
    assert cfg.data.path is None and cfg.llm.model and cfg.batch_size == 4 and cfg.resume is True
    assert cfg.agent.name == "heuristic"


def test_build_predictor_choices():
    cfg = _compose([])
    assert eval_tasks.build_predictor(OmegaConf.merge(cfg, {"predictor": "random"}), None).name == "random"
    with pytest.raises(ValueError, match="unknown predictor 'oracle'"):
        eval_tasks.build_predictor(OmegaConf.merge(cfg, {"predictor": "oracle"}), None)
    with pytest.raises(ValueError, match="unknown judge"):
        eval_tasks.build_judge(OmegaConf.merge(cfg, {"judge": "human"}), None)
    llm = eval_tasks.build_predictor(OmegaConf.merge(cfg, {"predictor": "llm"}), None)
    assert llm.name == f"llm:{cfg.llm.model}" and llm.batch_size == 4


def test_app_runs_and_resumes(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    argv = ["rescue-eval-tasks", "predictor=majority", "tasks=[itp,rpp,stp,ssp]", f"hydra.run.dir={out}", "progress=false", "torch_threads=null"]
    monkeypatch.setattr(sys, "argv", argv)
    eval_tasks.main()
    res = json.loads((out / "tasks.json").read_text())
    assert list(res) == ["itp", "rpp", "stp", "ssp"] and res["itp"]["n"] > 0
    printed = capsys.readouterr().out
    assert "82.62" in printed and "tasks.json" in printed
    n = len((out / "details.jsonl").read_text().splitlines())
    eval_tasks.main()  # same folder: resumed, nothing added
    assert len((out / "details.jsonl").read_text().splitlines()) == n


def test_app_with_an_agent(tmp_path, monkeypatch):
    pytest.importorskip("rescue_env.agents.registry")
    out = tmp_path / "agent"
    monkeypatch.setattr(sys, "argv", ["rescue-eval-tasks", "predictor=agent", "agent=heuristic", "tasks=[itp,ssp]", f"hydra.run.dir={out}", "progress=false", "torch_threads=null"])
    eval_tasks.main()
    res = json.loads((out / "tasks.json").read_text())
    assert res["itp"]["predictor"] == "agent:heuristic" and res["ssp"]["failed"] == 0


# --- the second real slice (five more couples, one of them with three partners) -------------


def test_app_on_the_second_slice_follows_the_three_partner_couple(tmp_path, monkeypatch, real_more_path):
    out = tmp_path / "more"
    argv = ["rescue-eval-tasks", f"data.path={real_more_path}", "predictor=prior", "tasks=[itp,rpp,stp,ssp]",
            f"hydra.run.dir={out}", "progress=false", "torch_threads=null"]
    monkeypatch.setattr(sys, "argv", argv)
    eval_tasks.main()
    res = json.loads((out / "tasks.json").read_text())
    assert all(res[t]["n"] > 0 and res[t]["failed"] == 0 for t in ("itp", "rpp", "stp", "ssp"))
    three = "aryn_josh_and_lorena/009_s04e09_ct34_segment04"
    assert three in res["stp"]["by_sample"]
    # the target candidates are the group as it is: Josh, the three dyads and the couple
    from rescue_env.data import load_dialogues
    from rescue_env.tasks.instances import build_stp

    stp = [i for i in build_stp(load_dialogues(real_more_path), "paper").instances if i.sample_id == three]
    assert stp and all({"Josh", "Aryn & Josh", "Lorena & Josh", "Couple"} <= set(i.candidates) for i in stp)


def test_an_agent_predictor_ranks_the_three_partner_couple_and_a_small_policy_refuses_it(real_more_dialogues):
    """Couples of three are encodable (env.max_members=3), so a rule agent ranks over all
    three partners; a policy trained on couples of two refuses the sample by name."""
    from types import SimpleNamespace

    from rescue_env.data import GroupSizeError

    registry = pytest.importorskip("rescue_env.agents.registry")
    predictor = AgentPredictor(lambda scenario: registry.make_agent("heuristic", scenario))
    predictor.prepare("itp", "paper", real_more_dialogues)  # no member left out, no error
    small_policy = SimpleNamespace(observer=SimpleNamespace(cap=2), name="trained")
    with pytest.raises(GroupSizeError, match=r"aryn_josh_and_lorena/009_s04e09_ct34_segment04' has 3 members.*trained on groups of at most 2"):
        check_agent_groups(small_policy, "couple", real_more_dialogues)
