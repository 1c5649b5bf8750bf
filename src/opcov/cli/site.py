"""``opcov site``: the static coverage website rendered from coverage/ data (opcov.site)."""

from __future__ import annotations

from opcov.activity import activity
from opcov.cli import options
from opcov.errors import EXIT_OK


def add_parser(sub) -> None:
    st = sub.add_parser("site", help="render the static coverage website from coverage/ data (no torch import)")
    options.add_coverage(st)
    st.add_argument("--out", default="site", help="output folder (default: %(default)s)")
    st.add_argument(
        "--no-cache",
        action="store_true",
        help="parse and judge everything, and keep nothing for the next build (by default what did not change "
        "since the last build of this coverage folder is read back from the user's cache folder, and a first "
        "build reads the answer committed with the data, coverage/answers/site.json.gz, where it is fresh)",
    )


def run(args) -> int:
    from opcov.site.render import render_site
    from opcov.store import layout

    args.coverage = layout.site_coverage(args.coverage)
    with activity(f"rendering {args.out}/ from {args.coverage}/"):
        stats = render_site(args.coverage, args.out, hold=args.held, cache=not args.no_cache)
    print(
        f"{args.out}: {stats['files']} files ({stats['ops']} ops, {stats['backends']} backends, "
        f"{stats['models']} models), {stats['written']} written, {stats['removed']} removed; "
        f"{stats['catalog_note']}"
    )
    return EXIT_OK


COMMANDS = {"site": (add_parser, run)}
