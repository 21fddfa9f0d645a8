"""The Spark class archive is used only when it is there: a missing or unnamed one leaves the
JVM's options alone (a JVM told to map an archive that is not whole would crash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.spark import class_archive
from baton.spark.class_archive import ENV_ARCHIVE, java_options


def test_options_name_the_archive_only_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "classes.jsa"
    monkeypatch.setenv(ENV_ARCHIVE, str(archive))
    assert java_options() == ""
    archive.write_bytes(b"x")
    assert java_options().startswith(f"-XX:SharedArchiveFile={archive} ")
    assert "-Xlog:cds=off" in java_options()
    monkeypatch.delenv(ENV_ARCHIVE)
    assert java_options() == ""


def test_the_command_says_how_it_is_used() -> None:
    with pytest.raises(SystemExit, match=r"usage: python -m baton\.spark\.class_archive FILE"):
        class_archive.main([])
