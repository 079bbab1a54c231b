"""The seed article's section 5.2 (LLM training-data processing) on Ember, as written:

    ds = ray.data.read_json("s3://corpus/raw/")
    ds = ds.map_batches(detect_language, batch_size=1000)
    ds = ds.filter(lambda x: x["lang"] == "zh" and x["score"] > 0.8)
    ds = ds.map_batches(compute_minhash, batch_size=500)
    ds = deduplicate(ds, threshold=0.8)
    ds = ds.map_batches(quality_score, batch_size=500, num_gpus=0.25)
    ds = ds.filter(lambda x: x["quality"] > 0.6)
    ds = ds.map_batches(tokenize, batch_size=256)
    ds.write_parquet("s3://corpus/processed/")

with real implementations of the article's functions: script-based language detection,
MinHash signatures over character 3-grams, a MinHash-LSH dedup written with Dataset ops
(flat_map to band buckets, groupby().map_groups to find near-duplicates, unique + filter), a
heuristic quality model on a quarter of a (logical) GPU, and a character tokenizer. The raw
corpus (Chinese and English documents, planted near-duplicates and junk) is generated into a
local S3-compatible server (moto on 127.0.0.1). Embedded cluster: 4 CPUs, 1 logical GPU.

    .venv/bin/python examples/data_llm_corpus.py
"""
from __future__ import annotations

import json
import random
import sys
import time
import zlib

import numpy as np

import ember as ray
from ember.data.testing import LocalS3Server

NUM_PERM = 64
BANDS, ROWS = 16, 4          # LSH: 16 bands of 4 rows -> candidates from ~0.5 similarity up
_P = (1 << 61) - 1
_rng = np.random.default_rng(42)
_A = _rng.integers(1, _P, NUM_PERM, dtype=np.uint64)
_B = _rng.integers(0, _P, NUM_PERM, dtype=np.uint64)


def _is_cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff"


def detect_language(batch):
    """lang = the dominant script of the text; score = its share of the letters."""
    langs, scores = [], []
    for text in batch["text"]:
        letters = [c for c in text if c.isalpha()]
        if not letters:
            langs.append("unknown")
            scores.append(0.0)
            continue
        cjk = sum(_is_cjk(c) for c in letters) / len(letters)
        latin = sum(c.isascii() for c in letters) / len(letters)
        lang, score = ("zh", cjk) if cjk >= latin else ("en", latin)
        langs.append(lang)
        scores.append(float(score))
    batch["lang"] = np.array(langs)
    batch["score"] = np.array(scores)
    return batch


def _shingles(text: str, k: int = 3) -> np.ndarray:
    grams = {text[i:i + k] for i in range(max(1, len(text) - k + 1))}
    return np.fromiter((zlib.crc32(g.encode()) for g in grams), dtype=np.uint64, count=len(grams))


def compute_minhash(batch):
    """64 MinHash values per document over its character 3-grams."""
    sigs = np.empty((len(batch["text"]), NUM_PERM), dtype=np.uint64)
    for i, text in enumerate(batch["text"]):
        h = _shingles(text)
        # (a*h + b) mod p for every permutation, minimum over the shingles
        sigs[i] = ((np.outer(_A, h) + _B[:, None]) % _P).min(axis=1)
    batch["minhash"] = sigs
    return batch


def _band_rows(row):
    sig = row["minhash"]
    return [{"band": f"{b}:{zlib.crc32(sig[b * ROWS:(b + 1) * ROWS].tobytes())}",
             "id": row["id"], "minhash": sig} for b in range(BANDS)]


def deduplicate(ds, threshold=0.8):
    """MinHash LSH with Dataset ops: documents sharing a band bucket are candidates; a candidate
    whose estimated Jaccard similarity to the bucket's first document is >= threshold is a
    duplicate and is dropped (the document with the smallest id is kept)."""

    def find_duplicates(group):
        order = np.argsort(group["id"])
        ids, sigs = group["id"][order], np.stack(group["minhash"])[order]
        keep = sigs[0]
        sim = (sigs[1:] == keep).mean(axis=1)
        return {"dup_id": ids[1:][sim >= threshold]}

    buckets = ds.select_columns(["id", "minhash"]).flat_map(_band_rows)
    dups = set(buckets.groupby("band").map_groups(find_duplicates).unique("dup_id"))
    return ds.filter(lambda x: x["id"] not in dups).drop_columns(["minhash"])


def quality_score(batch):
    """A small quality model: length, character diversity, repetition and punctuation."""
    gpu = ray.get_gpu_ids()  # this task holds a quarter of the logical GPU
    assert gpu, "quality_score should run with a GPU share"
    q = []
    for text in batch["text"]:
        n = len(text)
        diversity = len(set(text)) / max(1, min(n, 200))
        lines = [ln for ln in text.split("。") if ln]
        repeat = 1 - len(set(lines)) / max(1, len(lines))
        length = min(1.0, n / 200)
        punct = min(1.0, text.count("。") / max(1, n / 40))
        q.append(float(0.35 * length + 0.35 * min(1.0, diversity) + 0.2 * (1 - repeat) + 0.1 * punct))
    batch["quality"] = np.array(q)
    return batch


def tokenize(batch):
    """Character tokenizer: one id per character (CJK block offset, else byte value)."""
    toks = []
    for text in batch["text"]:
        toks.append(np.array([ord(c) - 0x4e00 + 256 if _is_cjk(c) else min(ord(c), 255)
                              for c in text], dtype=np.int32))
    batch["tokens"] = np.array(toks, dtype=object)
    return batch


# --- generated corpus ------------------------------------------------------------------------

def _zh_doc(rng: random.Random, n: int) -> str:
    sents = []
    for _ in range(n):
        sents.append("".join(chr(0x4e00 + rng.randrange(3000)) for _ in range(rng.randint(8, 30))))
    return "。".join(sents) + "。"


def _en_doc(rng: random.Random, n: int) -> str:
    words = ["data", "ray", "model", "train", "cluster", "token", "shard", "batch", "gpu", "corpus"]
    return " ".join(rng.choice(words) for _ in range(n * 8)) + "."


def make_corpus(fs, files: int = 6, docs_per_file: int = 800) -> dict[str, int]:
    rng = random.Random(7)
    counts = {"zh": 0, "en": 0, "near_dup": 0, "junk": 0}
    doc_id = 0
    zh_pool: list[str] = []
    for f in range(files):
        lines = []
        for _ in range(docs_per_file):
            r = rng.random()
            if r < 0.2:
                text = _en_doc(rng, rng.randint(3, 12))
                counts["en"] += 1
            elif r < 0.3 and zh_pool:  # near-duplicate of an earlier document: one char changed
                base = list(rng.choice(zh_pool))
                base[rng.randrange(len(base))] = "的"
                text = "".join(base)
                counts["near_dup"] += 1
            elif r < 0.36:  # junk: one short sentence repeated
                s = _zh_doc(rng, 1)
                text = s * rng.randint(5, 20)
                counts["junk"] += 1
            else:
                text = _zh_doc(rng, rng.randint(4, 15))
                zh_pool.append(text)
                counts["zh"] += 1
            lines.append(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False))
            doc_id += 1
        with fs.open_output_stream(f"corpus/raw/part-{f:03d}.jsonl") as out:
            out.write(("\n".join(lines) + "\n").encode())
    counts["total"] = doc_id
    return counts


def main() -> int:
    with LocalS3Server() as s3:
        s3.create_bucket("corpus")
        counts = make_corpus(s3.filesystem())
        ray.init(num_cpus=4, num_gpus=1)
        try:
            t0 = time.time()
            # --- the article's pipeline (5.2), as written ---
            ds = ray.data.read_json("s3://corpus/raw/")
            # 1. 语言检测和过滤
            ds = ds.map_batches(detect_language, batch_size=1000)
            ds = ds.filter(lambda x: x["lang"] == "zh" and x["score"] > 0.8)
            # 2. 去重（MinHash LSH）
            ds = ds.map_batches(compute_minhash, batch_size=500)
            ds = deduplicate(ds, threshold=0.8)
            # 3. 质量过滤
            ds = ds.map_batches(quality_score, batch_size=500, num_gpus=0.25)
            ds = ds.filter(lambda x: x["quality"] > 0.6)
            # 4. Tokenize 并写出
            ds = ds.map_batches(tokenize, batch_size=256)
            ds.write_parquet("s3://corpus/processed/")
            elapsed = time.time() - t0
            out = ray.data.read_parquet("s3://corpus/processed/")
            n_out = out.count()
            langs = set(out.unique("lang"))
            min_quality = out.min("quality")
            stats = ds.stats()
        finally:
            ray.shutdown()
    print(f"raw documents: {counts}")
    print(f"written to s3://corpus/processed/: {n_out} documents, languages {langs}, "
          f"min quality {min_quality:.2f}")
    print(stats.split("\n\n")[-1])
    print(f"5.2 pipeline: {elapsed:.1f}s")
    expected_max = counts["zh"] + counts["junk"]
    ok = langs == {"zh"} and min_quality > 0.6 and counts["zh"] * 0.8 <= n_out <= expected_max
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
