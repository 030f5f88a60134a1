"""Put the WordNet database from Debian's wordnet-base package where nltk finds it, with no download.

nltk's METEOR needs WordNet. Debian installs its files in /usr/share/wordnet; nltk 3.10 refuses symlinks
that leave its data folder, so the files are copied into `<venv>/share/nltk_data/corpora/wordnet` (a folder
nltk searches without any variable), and the `lexnames` file Debian does not ship is written from the 45
lexicographer file names of WordNet 3.0 (lexnames(5WN)). Run by `make install`: python -m rcagent.eval.wordnet
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

DEBIAN = Path("/usr/share/wordnet")
FILES = ("data.adj", "data.adv", "data.noun", "data.verb", "index.adj", "index.adv", "index.noun",
         "index.verb", "adj.exc", "adv.exc", "noun.exc", "verb.exc", "cntlist.rev", "index.sense")
# number, name, part of speech (1 noun, 2 verb, 3 adjective, 4 adverb), in the order of lexnames(5WN)
LEXNAMES = """adj.all 3, adj.pert 3, adv.all 4, noun.Tops 1, noun.act 1, noun.animal 1, noun.artifact 1,
noun.attribute 1, noun.body 1, noun.cognition 1, noun.communication 1, noun.event 1, noun.feeling 1,
noun.food 1, noun.group 1, noun.location 1, noun.motive 1, noun.object 1, noun.person 1, noun.phenomenon 1,
noun.plant 1, noun.possession 1, noun.process 1, noun.quantity 1, noun.relation 1, noun.shape 1,
noun.state 1, noun.substance 1, noun.time 1, verb.body 2, verb.change 2, verb.cognition 2,
verb.communication 2, verb.competition 2, verb.consumption 2, verb.contact 2, verb.creation 2,
verb.emotion 2, verb.motion 2, verb.perception 2, verb.possession 2, verb.social 2, verb.stative 2,
verb.weather 2, adj.ppl 3"""


def nltk_data_dir() -> Path:
    return Path(sys.prefix) / "share" / "nltk_data"


def lexnames() -> str:
    entries = [e.split() for e in LEXNAMES.replace("\n", " ").split(",")]
    return "".join(f"{i:02d}\t{name}\t{pos}\n" for i, (name, pos) in enumerate(entries))


def install(src: Path = DEBIAN, data_dir: Path | None = None) -> Path:
    """Copy the WordNet files into nltk's data folder; returns the corpus folder."""
    missing = [f for f in FILES if not (src / f).is_file()]
    if missing:
        raise SystemExit(f"WordNet files missing in {src}: {', '.join(missing)}. Install the Debian packages: "
                         "apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index")
    dest = (data_dir or nltk_data_dir()) / "corpora" / "wordnet"
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(src / name, dest / name)
    (dest / "lexnames").write_text(lexnames())
    return dest


if __name__ == "__main__":
    print(f"WordNet copied to {install()}")
