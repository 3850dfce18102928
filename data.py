"""CIFAR-10 (section 4.1): batches made on the training device; download, verify, load.

    python data.py [--data-dir data] [--dataset cifar10|synthetic]   # summary, identity, sample grid

Images stay uint8 on the training device. Augmentation (random crop 32 with 4 pixels of zero
padding, horizontal flip) and normalization run there on whole batches: no per-image Python
work, no DataLoader workers. Every random choice of an epoch (order, crops, flips) is a
function of (seed, epoch, batch, process). So a run resumed mid-epoch sees exactly the
batches it would have seen.

Also a `synthetic` set, made in memory in a second, for smoke runs, tests and CPU demos.
Each class is a 4 x 4 binary motif tiled over the image at a random phase, in random colours,
with noise. Every pixel is "on" with probability 1/2 in every class. So per-pixel colour
statistics carry no label information; only local spatial patterns do.

Reading order: a split of images, their statistics, the augmentation and `Batches`. Below the
`# ----` line, skipped on a first reading: where the images come from (CIFAR-10's download
and checks, the synthetic set, what a run records of them) and the command line.
"""
import hashlib
import os
import pickle
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from runtime import command_line, option, output_folder, parse_flags


@dataclass
class Split:
    images: torch.Tensor  # uint8 [N, 3, 32, 32]
    labels: torch.Tensor  # int64 [N]

    def to(self, device) -> "Split":
        return Split(self.images.to(device), self.labels.to(device))


def channel_stats(images: torch.Tensor) -> tuple:
    """Per-channel mean and std of uint8 images, on the [0, 1] scale: two [3] tensors."""
    x = images.double().div_(255).transpose(0, 1).reshape(3, -1)
    return x.mean(1).float(), x.std(1).float()


def generator(device, *keys: int) -> torch.Generator:
    """A generator seeded by a tuple of integers: (seed, epoch, batch) gives every batch its own."""
    seed = int(hashlib.sha256(repr(keys).encode()).hexdigest()[:15], 16)
    return torch.Generator(device=device).manual_seed(seed)


def augment(images: torch.Tensor, g: torch.Generator, pad: int = 4) -> torch.Tensor:
    """A random crop of the original size from the zero-padded image, then a random horizontal
    flip. One call does a whole uint8 batch [B, 3, H, W]."""
    B, C, H, W = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))
    offset = torch.randint(0, 2 * pad + 1, (2, B, 1), generator=g, device=images.device)
    flip = torch.rand(B, 1, generator=g, device=images.device) < 0.5
    cols = torch.arange(W, device=images.device)
    rows = torch.arange(H, device=images.device)[None, :] + offset[0]  # [B, H]
    cols = torch.where(flip, W - 1 - cols, cols) + offset[1]  # [B, W], mirrored where flipped
    b = torch.arange(B, device=images.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


class Batches:
    """Mini-batches of a Split held on `device`: shuffled, augmented and normalized per batch.

    With `shard=(rank, world)` each process of a distributed run takes every world-th image
    of the shared order. Iterate with `epoch(e, start=b)` to begin at batch b."""

    def __init__(self, split: Split, batch_size: int, mean, std, train: bool, seed: int = 0,
                 device="cpu", shard=(0, 1)):
        self.split = split.to(device)
        self.batch_size, self.train, self.seed, self.device, self.shard = batch_size, train, seed, device, shard
        self.mean = torch.as_tensor(mean, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.as_tensor(std, device=device).view(1, 3, 1, 1) * 255
        rank, world = shard
        # Training gives each process the same number of images, dropping the order's ragged end.
        # Evaluation sees every image exactly once, whatever the number of processes.
        self.size = len(split.labels) // world if train else len(range(rank, len(split.labels), world))
        self.steps = self.size // batch_size if train else -(-self.size // batch_size)

    def __len__(self):
        return self.steps

    def order(self, epoch: int) -> torch.Tensor:
        n = len(self.split.labels)
        if not self.train:
            index = torch.arange(n, device=self.device)
        else:
            index = torch.randperm(n, generator=generator("cpu", self.seed, epoch)).to(self.device)
        rank, world = self.shard
        return index[rank:self.size * world:world] if self.train else index[rank::world]

    def epoch(self, epoch: int, start: int = 0):
        index = self.order(epoch)
        for b in range(start, self.steps):
            idx = index[b * self.batch_size:(b + 1) * self.batch_size]
            images = self.split.images[idx]
            if self.train:
                images = augment(images, generator(self.device, self.seed, epoch, b, self.shard[0]))
            yield (images.float() - self.mean) / self.std, self.split.labels[idx]


# ---- where the images come from: CIFAR-10's download and checks, the synthetic set -------------
# and the command line (skip on first reading)

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
# The md5 of the six batch files' md5s (in BATCHES order) names the copy a run read: the
# official files (their md5s as torchvision lists them), or the JPEG q75 rebuild used for
# development on machines that cannot download the archive (lab/RESULTS.md).
KNOWN_COPIES = {
    hashlib.md5("c99cafc152244af753f735de768cd75f d4bba439e000b95fd0a9bffe97cbabec 54ebc095f3ab1f0389bbae665268c751 "
                "634d18415352ddfa80567beed471001a 482c414d41f54cd18b22e5b47cb7c3cb 40351d587109b95175f43aff81a1287e"
                .encode()).hexdigest(): "CIFAR-10",
    hashlib.md5("de0bff498a99b8abbce341fde4752b3c f03a460543db8de94aa9d8a5c851d5eb 2487c6a4a97686222c5ebf3d8481715b "
                "b7c0cab468242b48a6c6c5ecc5657917 1662c97eb1661820d41361b06e78e703 d67bf351bcb7fc2fe981c4b1e3ace8ca"
                .encode()).hexdigest(): "CIFAR-10 (JPEG q75 copy)",
}


class DataError(RuntimeError):
    """A data set that cannot be found, downloaded or read; the message says what to do."""


def md5sum(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, target: Path):
    """Download to a temporary file beside `target` with a progress bar, then rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                total = int(response.headers.get("Content-Length", 0))
                done = 0
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    tmp.write(chunk)
                    done += len(chunk)
                    if total:
                        print(f"\rdownloading {url}: {done / total:6.1%} of {total / 2**20:.0f} MiB",
                              end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
        except BaseException:
            Path(tmp.name).unlink(missing_ok=True)
            raise
    Path(tmp.name).replace(target)


def extract(archive: Path, data_dir: Path):
    """Extract `cifar-10-batches-py/` safely into a temporary folder, then rename it into place,
    so a failed extraction never leaves a half-written folder. Safely: plain files and folders
    inside it only (`safe_members`), and tarfile's data filter where Python has it (3.10.12,
    3.11.4, 3.12 and later; an earlier release has no `filter` argument)."""
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = safe_members(tar, Path(tmp), archive)
                tar.extractall(tmp, members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        except (tarfile.TarError, EOFError, OSError) as e:
            raise DataError(f"{archive} is truncated or corrupt ({e}); delete it and try again") from e
        if not (Path(tmp) / FOLDER).is_dir():
            raise DataError(f"{archive} holds no {FOLDER}/ folder: not the CIFAR-10 python archive")
        (Path(tmp) / FOLDER).replace(data_dir / FOLDER)


def safe_members(tar: tarfile.TarFile, folder: Path, archive: Path) -> list:
    """The archive's members, refused (DataError) if one is a link or a device, or would be
    written outside `folder` (an absolute path, or one through ..)."""
    root = os.path.realpath(folder)
    members = tar.getmembers()
    for member in members:
        target = os.path.realpath(os.path.join(root, member.name))
        if not (member.isfile() or member.isdir()) or os.path.commonpath([root, target]) != root:
            raise DataError(f"{archive} holds {member.name!r}, a link or a path outside its folder: "
                            "not the CIFAR-10 python archive")
    return members


def read_batch(path: Path) -> Split:
    """One file of the official python layout: a pickled dict with b'data' [N, 3072] and b'labels'."""
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        data = torch.as_tensor(batch[b"data"], dtype=torch.uint8)
        labels = torch.as_tensor(batch[b"labels"], dtype=torch.int64)
    except FileNotFoundError:
        raise DataError(f"{path} is missing: the {FOLDER}/ folder is incomplete") from None
    except Exception as e:  # a truncated pickle raises any of several types
        raise DataError(f"{path} is truncated or corrupt ({type(e).__name__}: {e})") from e
    if data.dim() != 2 or data.shape[1] != 3072 or len(labels) != len(data) or not len(data):
        raise DataError(f"{path} does not hold CIFAR-10 images (data {list(data.shape)}, {len(labels)} labels)")
    if labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{path} has labels outside 0..9")
    return Split(data.view(-1, 3, 32, 32), labels)


def load_cifar10(data_dir="data", md5: str = MD5, url: str = URL) -> tuple:
    """(train, test) Splits from `data_dir`: its cifar-10-batches-py/ folder, else the official
    archive there (md5-verified), else downloaded into it."""
    data_dir = Path(data_dir)
    folder, archive = data_dir / FOLDER, data_dir / ARCHIVE
    if not folder.is_dir():
        if not archive.exists():
            try:
                download(url, archive)
            except OSError as e:
                raise DataError(f"CIFAR-10 is not in {data_dir}/ and could not be downloaded ({e}). "
                                f"Put {ARCHIVE} (md5 {md5}, from {url}) or its extracted {FOLDER}/ "
                                f"folder in {data_dir}/, or pass --data-dir (README: Set up).") from None
        if md5sum(archive) != md5:
            raise DataError(f"{archive} fails its md5 check (expected {md5}): truncated or not the "
                            "official archive; delete it and try again")
        extract(archive, data_dir)
    *train, test = [read_batch(folder / name) for name in BATCHES]
    return Split(torch.cat([s.images for s in train]), torch.cat([s.labels for s in train])), test


TRAIN_IMAGES = {"cifar10": 50_000, "synthetic": 10_000}  # the training split of each dataset


def make_synthetic(n_train: int = TRAIN_IMAGES["synthetic"], n_test: int = 2000, seed: int = 0) -> tuple:
    """(train, test) Splits of tiled 4 x 4 motifs, one motif per class (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    motifs, seen = [], set()
    while len(motifs) < 10:  # 8 of 16 cells on; distinct under cyclic shifts and mirroring
        m = torch.zeros(16)
        m[torch.randperm(16, generator=g)[:8]] = 1
        m = m.view(4, 4)
        variants = {tuple(torch.roll(v, (dy, dx), (0, 1)).flatten().int().tolist())
                    for v in (m, m.flip(1)) for dy in range(4) for dx in range(4)}
        if not variants & seen:
            seen |= variants
            motifs.append(m)
    motifs = torch.stack(motifs)  # [10, 4, 4]

    def split(n):
        labels = torch.randint(0, 10, (n,), generator=g)
        phase = torch.randint(0, 4, (n, 2), generator=g)
        idx = torch.arange(32)
        rows = (idx[None, :] + phase[:, :1]) % 4  # [n, 32]
        cols = (idx[None, :] + phase[:, 1:]) % 4
        on = motifs[labels[:, None, None], rows[:, :, None], cols[:, None, :]]  # [n, 32, 32]
        fg, bg = torch.rand(n, 3, 1, 1, generator=g), torch.rand(n, 3, 1, 1, generator=g)
        images = bg + (fg - bg) * on[:, None] + 0.1 * torch.randn(n, 3, 32, 32, generator=g)
        return Split((images.clamp(0, 1) * 255).round().to(torch.uint8), labels)

    return split(n_train), split(n_test)


def load(dataset: str, data_dir="data", seed: int = 0) -> tuple:
    if dataset == "cifar10":
        return load_cifar10(data_dir)
    if dataset == "synthetic":
        return make_synthetic(seed=seed)
    raise ValueError(f"unknown dataset {dataset!r}; choose cifar10 or synthetic")


def identity(dataset: str, data_dir="data", seed: int = 0) -> dict:
    """What a run reads, for its record: {"name", "md5"}. CIFAR-10: the md5 of its six batch
    files' md5s, named after the copy it matches; synthetic: the md5 of the images it makes."""
    if dataset == "synthetic":
        train, test = make_synthetic(seed=seed)
        digest = hashlib.md5(train.images.numpy().tobytes() + test.images.numpy().tobytes()).hexdigest()
        return dict(name=f"synthetic motifs (seed {seed})", md5=digest)
    folder = Path(data_dir) / FOLDER
    digest = hashlib.md5(" ".join(md5sum(folder / name) for name in BATCHES).encode()).hexdigest()
    return dict(name=KNOWN_COPIES.get(digest, "CIFAR-10 (an unknown copy: its files match neither the official "
                                               "batches nor the JPEG q75 copy)"), md5=digest)


def training_subset(train: Split, subset: int, seed: int) -> Split:
    """The `subset` training images a run uses (0: all), a fixed random choice of its seed."""
    if subset > len(train.labels):
        raise ValueError(f"--subset {subset}: the training set has {len(train.labels)} images")
    if not subset:
        return train
    keep = torch.randperm(len(train.labels), generator=generator("cpu", seed, -1))[:subset]
    return Split(train.images[keep], train.labels[keep])


def save_grid(split: Split, path: Path, names=CLASSES, per_class: int = 8):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(10, per_class, figsize=(per_class * 0.8, 10 * 0.8))
    for c in range(10):
        picks = (split.labels == c).nonzero().flatten()[:per_class]
        for j, ax in enumerate(axes[c]):
            ax.axis("off")
            if j < len(picks):
                ax.imshow(split.images[picks[j]].permute(1, 2, 0).numpy())
        axes[c, 0].set_title(names[c], fontsize=7, loc="left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


@dataclass
class Config:
    data_dir: str = option("data", "folder holding (or to receive) CIFAR-10")
    dataset: str = option("cifar10", "CIFAR-10, or tiled motifs made in memory", choices=["cifar10", "synthetic"])
    out: str = option("", "folder for the sample grid (default runs/data)")


def main():
    args = Config(**parse_flags(Config, __doc__))
    out = output_folder(args.out, "runs/data")  # refused before loading if it holds a run
    train, test = load(args.dataset, args.data_dir)
    mean, std = channel_stats(train.images)
    for name, split in (("train", train), ("test", test)):
        counts = torch.bincount(split.labels, minlength=10).tolist()
        print(f"{name}: {len(split.labels)} images {list(split.images.shape[1:])} uint8, per class {counts}")
    print(f"train mean {[round(v, 4) for v in mean.tolist()]}, std {[round(v, 4) for v in std.tolist()]} (RGB, [0, 1])")
    found = identity(args.dataset, args.data_dir)
    print(f"data: {found['name']} (md5 {found['md5']})")
    path = out / f"data_{args.dataset}_samples.png"
    save_grid(train, path, CLASSES if args.dataset == "cifar10" else [f"motif {c}" for c in range(10)])
    print(f"wrote {path}")


if __name__ == "__main__":
    command_line(main, (DataError, ValueError))
