"""What to tell a user who called on an optional extra that is not installed."""

from __future__ import annotations


def missing_extra(what: str, extra: str, packages: str) -> str:
    """One line saying ``what`` needs the ``extra`` and how to install it.

    convstore is installed from a checkout (it is not on a package index), so the hint names
    both the extra for an editable install and the packages it brings.
    """
    return (
        f"{what} needs convstore's '{extra}' extra: pip install -e '.[{extra}]' in the "
        f"convstore checkout, or pip install {packages}"
    )
