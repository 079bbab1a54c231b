"""read_images / write_images on a real embedded cluster with image files Pillow writes in the
test: shapes and modes, size, mode, include_paths, extension filtering, non-images refused,
images feeding map_batches and iter_torch_batches, and a write/read round trip."""
from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

import ember

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


def _rgb(h, w, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture
def image_dir(tmp_path):
    d = tmp_path / "imgs"
    (d / "sub").mkdir(parents=True)
    Image.fromarray(_rgb(8, 12, 0)).save(d / "a.png")
    Image.fromarray(_rgb(20, 10, 1)).save(d / "sub" / "b.bmp")
    Image.fromarray(np.full((6, 7), 200, np.uint8), mode="L").save(d / "c.png")
    Image.fromarray(_rgb(16, 16, 2)).save(d / "d.jpg", quality=95)
    (d / "notes.txt").write_text("not an image")
    return d


def test_read_images_shapes_modes_and_paths(cluster, image_dir):
    rows = ember.data.read_images(str(image_dir), include_paths=True).take_all()
    by_name = {os.path.basename(r["path"]): r["image"] for r in rows}
    assert sorted(by_name) == ["a.png", "b.bmp", "c.png", "d.jpg"]  # notes.txt filtered out
    assert by_name["a.png"].shape == (8, 12, 3) and by_name["a.png"].dtype == np.uint8
    np.testing.assert_array_equal(by_name["a.png"], _rgb(8, 12, 0))  # png is lossless
    np.testing.assert_array_equal(by_name["b.bmp"], _rgb(20, 10, 1))
    assert by_name["c.png"].shape == (6, 7) and (by_name["c.png"] == 200).all()
    assert by_name["d.jpg"].shape == (16, 16, 3)
    assert "path" not in ember.data.read_images(str(image_dir)).take(1)[0]


def test_size_and_mode(cluster, image_dir):
    ds = ember.data.read_images(str(image_dir), size=(5, 9), mode="L",
                                override_num_blocks=2)
    imgs = [r["image"] for r in ds.take_all()]
    assert len(imgs) == 4 and all(i.shape == (5, 9) for i in imgs)
    rgb = ember.data.read_images(str(image_dir / "c.png"), mode="RGB").take_all()
    assert rgb[0]["image"].shape == (6, 7, 3) and (rgb[0]["image"] == 200).all()
    with pytest.raises(ValueError, match="size must be"):
        ember.data.read_images(str(image_dir), size=(5,))
    with pytest.raises(ValueError, match="mode must be one of"):
        ember.data.read_images(str(image_dir), mode="XYZ")


def test_non_images_refused_and_unknown_arguments(cluster, image_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "fake.png").write_bytes(b"this is no png")
    with pytest.raises(Exception, match="fake.png is not an image"):
        ember.data.read_images(str(bad)).take_all()
    with pytest.raises(ValueError, match="'meta_provider'"):
        ember.data.read_images(str(image_dir), meta_provider=object())
    with pytest.raises(TypeError, match="unexpected keyword argument 'resize'"):
        ember.data.read_images(str(image_dir), resize=(3, 3))
    only_png = ember.data.read_images(str(image_dir), file_extensions=["png"]).count()
    assert only_png == 2


def test_images_to_map_batches_to_torch(cluster, image_dir):
    import torch

    def normalize(batch):
        batch["image"] = batch["image"].astype(np.float32) / 255.0
        return batch

    ds = ember.data.read_images(str(image_dir), size=(4, 4), mode="RGB").map_batches(normalize)
    batches = list(ds.iter_torch_batches(batch_size=3))
    assert [b["image"].shape[0] for b in batches] == [3, 1]
    assert all(isinstance(b["image"], torch.Tensor) and b["image"].dtype == torch.float32
               and b["image"].shape[1:] == (4, 4, 3) for b in batches)
    assert 0.0 <= float(torch.cat([b["image"] for b in batches]).min()) <= 1.0


def test_write_images_round_trip(cluster, image_dir, tmp_path):
    out = tmp_path / "out"
    src = ember.data.read_images(str(image_dir), include_paths=True)
    src.write_images(str(out), column="image")
    files = sorted(f for f in os.listdir(out) if not f.startswith("."))
    assert len(files) == 4 and all(f.endswith(".png") for f in files)
    before = sorted((r["image"].shape, int(r["image"].sum())) for r in src.take_all())
    after = sorted((r["image"].shape, int(r["image"].sum()))
                   for r in ember.data.read_images(str(out)).take_all())
    assert before == after  # png: every pixel back

    class Names(ember.data.FilenameProvider):
        def get_filename_for_row(self, row, write_uuid, task_index, block_index, row_index):
            return os.path.basename(row["path"]).split(".")[0] + ".bmp"

    src.write_images(str(tmp_path / "named"), "image", file_format="bmp",
                     filename_provider=Names(), mode="overwrite")
    assert sorted(os.listdir(tmp_path / "named")) == ["a.bmp", "b.bmp", "c.bmp", "d.bmp"]
    with pytest.raises(ValueError, match="already exists"):
        src.write_images(str(tmp_path / "named"), "image", mode="error")
    with pytest.raises(ValueError, match="cannot write file_format"):
        src.write_images(str(tmp_path / "x"), "image", file_format="nope")


def test_hive_partitions_label_images(cluster, tmp_path):
    for label, seed in (("cat", 3), ("dog", 4)):
        (tmp_path / f"label={label}").mkdir()
        Image.fromarray(_rgb(3, 3, seed)).save(tmp_path / f"label={label}" / "x.png")
    rows = ember.data.read_images(str(tmp_path), partitioning="hive").take_all()
    assert sorted(r["label"] for r in rows) == ["cat", "dog"]
    cat = next(r for r in rows if r["label"] == "cat")
    np.testing.assert_array_equal(cat["image"], _rgb(3, 3, 3))
    assert "label" not in ember.data.read_images(str(tmp_path)).take(1)[0]
    with pytest.raises(ValueError, match="partitioning must be None, 'hive' or"):
        ember.data.read_images(str(tmp_path), partitioning="dir")


def test_directory_partitioning_labels_images(cluster, tmp_path):
    from ember.data.datasource import Partitioning

    root = tmp_path / "root"
    for label, n in (("cat", 2), ("dog", 1)):
        (root / label / "2024").mkdir(parents=True)
        for i in range(n):
            Image.fromarray(_rgb(4, 4, i)).save(root / label / "2024" / f"{i}.png")
    part = Partitioning("dir", base_dir=str(root), field_names=["label", "year"],
                        field_types={"year": int})
    rows = ember.data.read_images(str(root), partitioning=part).take_all()
    assert sorted((r["label"], r["year"]) for r in rows) == [("cat", 2024)] * 2 + [("dog", 2024)]
    short = Partitioning("dir", field_names=["label"])
    with pytest.raises(Exception, match="2 directories under .* field_names \\['label'\\]"):
        ember.data.read_images(str(root), partitioning=short).take_all()
    with pytest.raises(ValueError, match="directory partitioning needs field_names"):
        Partitioning("dir")
    with pytest.raises(ValueError, match="'filesystem'"):
        Partitioning("hive", filesystem=object())
