"""What bench/plot_scaling.py and bench/plot_sizes.py share: the figure's title line (the run's
date, threads and load) and writing the PNG."""

import sys
from pathlib import Path


def finish(fig, results: dict, title: str, output: str, program: str) -> None:
    """Titles fig with `title` and the run's date, threads and load average, and saves it."""
    load = results.get("machine", {}).get("load_start") or ["?"]
    fig.suptitle(f"{title}: bench/compare {results.get('date', '')}, "
                 f"{results.get('threads', '?')} threads, load average {load[0]} at start"
                 f"{'; --quick: not a measurement' if results.get('quick') else ''}", fontsize=10)
    fig.tight_layout()
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"{program}: wrote {path}", file=sys.stderr)
