"""The terminal prints the user's text as written: data rows, paths and the CPU's flags are never read as markup."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console as RichConsole
from rich.table import Table

from finesweep.search.outputs.console import Console


def _screen() -> Console:
    return Console(RichConsole(record=True, width=300, highlight=False))


def test_brackets_in_the_users_text_print_as_written():
    console = _screen()
    device = SimpleNamespace(kind="cpu", name="AMD EPYC [avx2 avx512_bf16 avx512f]")
    console.header(SimpleNamespace(name="s"), device, "/runs/[draft]")
    console.data_report(SimpleNamespace(render=lambda: 'dropped 1 (duplicate), e.g. "see [/b] here [bold]x"'))
    console.step("Preparing [data]")
    console.warn("space.precision [bf16] is gone")
    screen = console.out.export_text()
    for written in ("device cpu (AMD EPYC [avx2 avx512_bf16 avx512f]); sweep folder /runs/[draft]",
                    'e.g. "see [/b] here [bold]x"', ">> Preparing [data]", "warning: space.precision [bf16] is gone"):
        assert written in screen, screen


def test_the_sweeps_own_console_reads_no_markup_in_tables_either():
    console = Console()
    console.out.file = io.StringIO()
    table = Table("trial", "note")
    table.add_row("trial-1", "[avx2] [/b]")
    console.out.print(table)
    assert "[avx2] [/b]" in console.out.file.getvalue()
