"""The gate's worker, listing: the GPU combinations of WORKTREE's suite that ``--bench``
selects, as a ``records.Listing`` (or ``records.Fatal``); no GPU needed.

    python harness/gate/worker/listing.py --tree WORKTREE --out names.json [--bench REGEX]
"""

import sys
from pathlib import Path

import common


def main() -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--tree", type=Path, required=True, help="worktree of the revision")
    args = parser.parse_args()
    tree = args.tree.resolve()

    def make():
        common.use_tree(tree)
        names = tuple(name for name, _, _ in common.discover(tree, args.bench))
        return common.records.Listing(names)

    return common.write(args.out, make)


if __name__ == "__main__":
    sys.exit(main())
