"""Tests of zoo.run.report: a command's --out file, reserved first, never overwritten."""

import os

import pytest

from zoo.run import flags
from zoo.run import report


def _report_parser():
    return flags.OneLineParser(prog="python -m zoo.x")


def test_a_report_never_overwrites_a_file(tmp_path, capsys):
    out = tmp_path / "report.md"
    out.write_text("mine")
    with pytest.raises(SystemExit):
        report.reserve(_report_parser(), str(out))
    assert "already exists; the zoo never overwrites" in capsys.readouterr().err
    assert out.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "report.md"]


def test_a_report_is_reserved_then_published(tmp_path, capsys):
    out = tmp_path / "report.md"
    partial = report.reserve(_report_parser(), str(out))
    assert os.path.exists(partial) and not out.exists()
    with pytest.raises(SystemExit):  # a second run on the same --out, meanwhile
        report.reserve(_report_parser(), str(out))
    assert "report.md.partial exists" in capsys.readouterr().err
    report.publish(partial, str(out), "table\n")
    report.discard(partial)
    assert out.read_text() == "table\n" and not os.path.exists(partial)


def test_a_file_that_appears_during_the_run_is_kept(tmp_path):
    out = tmp_path / "report.md"
    partial = report.reserve(_report_parser(), str(out))
    out.write_text("written by the user while the run trained")
    with pytest.raises(FileExistsError):
        report.publish(partial, str(out), "table\n")
    report.discard(partial)
    assert out.read_text() == "written by the user while the run trained"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_write_returns_the_work_and_publishes_its_text(tmp_path, capsys):
    out = tmp_path / "report.md"
    assert report.write(_report_parser(), str(out), lambda: ({"rows": 1}, "table\n")) == {
        "rows": 1}
    assert out.read_text() == "table\n"
    assert f"wrote {out}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_write_after_a_failed_work_leaves_nothing(tmp_path):
    out = tmp_path / "report.md"

    def work():
        assert os.path.exists(f"{out}.partial")  # reserved before the work starts
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        report.write(_report_parser(), str(out), work)
    assert list(tmp_path.iterdir()) == []


def test_write_without_out_only_runs_the_work(tmp_path):
    assert report.write(_report_parser(), None, lambda: (7, "text")) == 7


def test_show_prints_the_report_its_lines_and_the_wall_time(capsys):
    result = {"markdown": "| a |\n", "seconds": 2.25}
    assert report.show(result, ["best: x"]) == (result, "| a |\n")
    assert capsys.readouterr().out == "\n| a |\nbest: x\nwall time 2.2 s\n"
