"""Read a LeRobotDataset with lerobot itself (run by .venv-lerobot's Python, offline) and
save what it gives into an .npz for the tests to compare with the tapes:

    python lerobot_reader.py ROOT REPO_ID OUT.npz [FRAME ...]

Saves len, fps, episodes, features (JSON), every frame's observation.state, action,
next.reward, next.done, next.success, timestamp, frame_index, episode_index, index,
task (strings), and for each FRAME (a dataset index) each camera's decoded image; and
the dataset's statistics as lerobot loads them (``stats__FEATURE__STAT``) next to what
lerobot's own recorder would have pooled from the episodes' statistics, one episode after
another with its ``aggregate_stats`` (``pooled__FEATURE__STAT``).
"""

import json
import sys
from pathlib import Path

import numpy as np
from lerobot.datasets.compute_stats import aggregate_stats
from lerobot.datasets.io_utils import load_nested_dataset
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.utils import EPISODES_DIR

root, repo_id, out, *frames = sys.argv[1:]
dataset = LeRobotDataset(repo_id, root=root, video_backend="pyav")
columns = ["observation.state", "action", "next.reward", "next.done", "next.success",
           "timestamp", "frame_index", "episode_index", "index", "task_index"]
table = dataset.hf_dataset.with_format("numpy")
saved = {name.replace(".", "_"): np.stack(table[name]) for name in columns}
cameras = [k for k in dataset.meta.features if k.startswith("observation.images.")]
for index in map(int, frames):
    item = dataset[index]
    saved[f"task_of_{index}"] = np.array(item["task"])
    for camera in cameras:
        # LeRobot gives (C, H, W) floats in [0, 1]; back to (H, W, C) bytes
        image = (item[camera].numpy().transpose(1, 2, 0) * 255).round().astype(np.uint8)
        saved[f"image_{index}_{camera}"] = image
        saved[f"timestamp_{index}"] = item["timestamp"].numpy()
saved["len"] = np.array(len(dataset))
saved["fps"] = np.array(dataset.fps)
saved["episodes"] = np.array(dataset.num_episodes)
saved["features"] = np.array(json.dumps(dataset.meta.features))
saved["tasks"] = np.array(json.dumps(list(dataset.meta.tasks.index)))
saved["codebase_version"] = np.array(dataset.meta.info.codebase_version)
pooled = None
# (meta.episodes leaves the stats columns out: read the episodes with them, as lerobot does)
for row in load_nested_dataset(Path(root) / EPISODES_DIR):  # pooled as save_episode does
    episode: dict = {}
    for key, value in row.items():
        if key.startswith("stats/"):
            _, feature, stat = key.split("/")
            episode.setdefault(feature, {})[stat] = np.asarray(value)
    pooled = episode if pooled is None else aggregate_stats([pooled, episode])
for feature, stats in pooled.items():
    for stat, value in stats.items():
        saved[f"pooled__{feature}__{stat}"] = np.asarray(value)
        saved[f"stats__{feature}__{stat}"] = np.asarray(dataset.meta.stats[feature][stat])
np.savez(out, **saved)
