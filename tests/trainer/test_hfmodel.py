"""Models by Hugging Face name from a hub cache the test builds (no network): resolving, the content
hash a task pins, the refusals that say what to fetch, and a job round trip on such a model."""

import os
import subprocess
import sys

import pytest

from swarm.jobs import GenerateJob, InitJob, TaskSpec
from tests.hfcache import REVISION, add_model
from trainer import hfmodel
from trainer.jobenv import TaskRefused
from trainer.model import ModelLoadError, create_builtin_model, save_model
from trainer.pins import pins_for
from trainer.policy import PolicyError, base_model, model_dir

REPO = "swarm-test/tiny"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    model, tok = create_builtin_model(3)
    return save_model(model, tok, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny_dir):
    root = tmp_path / "hub"
    name = add_model(root, REPO, tiny_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root, name


def test_a_cached_model_resolves_and_loads_offline(cache, tiny_dir):
    root, name = cache
    directory = model_dir(name)
    assert directory == root / f"models--{REPO.replace('/', '--')}" / "snapshots" / REVISION
    model, tok = base_model(name)
    ref, _ = create_builtin_model(3)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert hfmodel.content_hash(directory) == hfmodel.content_hash(tiny_dir)  # the files, not where they are
    assert len(hfmodel.content_hash(directory)) == 48


def test_the_content_hash_covers_what_the_loader_reads(tiny_dir, tmp_path):
    """Files the loader never reads (a README, pickled weights, a repo's sub-folders) do not change it;
    any byte of a model file, or a file's name, does."""
    import shutil

    copy = shutil.copytree(tiny_dir, tmp_path / "copy")
    base = hfmodel.content_hash(copy)
    (copy / "README.md").write_text("hello")
    (copy / "pytorch_model.bin").write_bytes(b"pickle")
    (copy / "onnx").mkdir()
    (copy / "onnx" / "config.json").write_text("{}")
    assert hfmodel.content_hash(copy) == base
    (copy / "extra.json").write_text("{}")
    assert hfmodel.content_hash(copy) != base
    (copy / "extra.json").unlink()
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert hfmodel.content_hash(copy) != base


def test_names_must_pin_a_commit():
    for bad in ("hf:swarm-test/tiny", "hf:swarm-test/tiny@main", "hf:tiny@" + REVISION, "hf:a/b@" + "0" * 39):
        with pytest.raises(PolicyError, match="40-hex commit"):
            model_dir(bad)


def test_a_missing_model_offline_says_what_to_run(cache):
    with pytest.raises(PolicyError, match=r"not in the Hugging Face cache .*HF_HUB_OFFLINE is set: run `hf download "
                                          r"swarm-test/other --revision " + REVISION):
        model_dir(f"hf:swarm-test/other@{REVISION}")


def test_a_missing_model_online_with_the_hub_unreachable_says_what_to_run(tmp_path):
    """Online (HF_HUB_OFFLINE unset) the peer tries to download; with the hub unreachable (a closed
    local port here: no network is touched) the error names the command to run where it is reachable.
    huggingface_hub retries with backoff (about 25 s of sleeping): the sleeps are skipped, not the retries."""
    code = ("import time\ntime.sleep = lambda seconds: None\n"
            "from trainer.policy import model_dir, PolicyError\n"
            "try:\n    model_dir('hf:swarm-test/other@" + REVISION + "')\n"
            "except PolicyError as exc:\n    print(exc)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_ETAG_TIMEOUT="2",
               HF_HUB_DOWNLOAD_TIMEOUT="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "downloading it failed" in out and f"hf download swarm-test/other --revision {REVISION}" in out, out


def test_the_content_hash_is_pinned_and_checked_before_any_work(cache, tmp_path):
    from trainer.jobs import JobWorker

    root, name = cache
    want = pins_for(name, "digit-sort", {})["model_hash"]
    params = {"model_hash": want, "eval_prompts": 2, "group_size": 2, "max_new_tokens": 4}
    worker = JobWorker(tmp_path / "blobs", tmp_path / "state")
    v0 = worker.run("init", InitJob(TaskSpec("hf-ok", name, "digit-sort", params), seed=0))
    batch = worker.run("generate", GenerateJob(TaskSpec("hf-ok", name, "digit-sort", params), 0, v0.weights,
                                               (1, 2), 2, b"w" * 32))
    assert batch.num_tokens > 0

    # a peer whose copy differs (one byte of the weights) refuses the task: nothing generated, nothing stored
    other = tmp_path / "other-hub"
    source = tmp_path / "changed"
    source.mkdir()
    for f in model_dir(name).iterdir():
        data = bytearray(f.read_bytes())
        if f.name == "model.safetensors":
            data[-1] ^= 1
        (source / f.name).write_bytes(bytes(data))
    os.environ["HF_HUB_CACHE"] = str(other)  # monkeypatch restores it
    add_model(other, REPO, source)
    blobs_before = sorted(p.name for p in (tmp_path / "blobs").iterdir())
    fresh = JobWorker(tmp_path / "blobs", tmp_path / "state2")
    spec = TaskSpec("hf-other", name, "digit-sort", params)
    with pytest.raises(TaskRefused, match=f"hash to [0-9a-f]{{48}}, the task pins model_hash {want}.*hf download"):
        fresh.run("generate", GenerateJob(spec, 0, v0.weights, (1, 2), 2, b"w" * 32))
    assert sorted(p.name for p in (tmp_path / "blobs").iterdir()) == blobs_before


def test_task_params_require_the_hash_of_an_hf_model():
    from gossip.messages import TaskAnnouncement
    from swarm.taskparams import ParamError, TaskParams

    def task(model, params):
        return TaskAnnouncement(name="t", model=model, env="digit-sort", created_at=1.0, expires_at=2.0,
                                trainer_keys=(b"k" * 32,), validator_keys=(), async_level=1, params=params)

    with pytest.raises(ParamError, match="model_hash .* is required"):
        TaskParams.of(task(f"hf:{REPO}@{REVISION}", {}))
    with pytest.raises(ParamError, match="40-hex commit"):
        TaskParams.of(task(f"hf:{REPO}@main", {"model_hash": "0" * 48}))
    with pytest.raises(ParamError, match="model_hash"):
        TaskParams.of(task(f"hf:{REPO}@{REVISION}", {"model_hash": "abc"}))
    assert TaskParams.of(task(f"hf:{REPO}@{REVISION}", {"model_hash": "0" * 48})).model_hash == "0" * 48


def test_weights_that_do_not_load_refuse_the_task(cache, tmp_path):
    from trainer.jobs import JobWorker

    root, _ = cache
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    (broken / "tokenizer.json").write_text("{}")
    name = add_model(root, "swarm-test/broken", broken)
    params = {"model_hash": hfmodel.content_hash(model_dir(name)), "eval_prompts": 0}
    with pytest.raises(TaskRefused, match="refused: .*not a valid safetensors file.*delete it from the cache and run "
                                          "`hf download swarm-test/broken"):
        JobWorker(tmp_path / "blobs", tmp_path / "state").run("init", InitJob(TaskSpec("b", name, "digit-sort", params), 0))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="holds no model files"):
        hfmodel.content_hash(tmp_path / "empty")
    with pytest.raises(ModelLoadError, match="does not exist"):
        hfmodel.content_hash(tmp_path / "nowhere")
