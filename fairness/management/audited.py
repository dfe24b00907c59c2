"""The base of the management commands that change something: they act through the audited
actions, as the OS user who ran them, with their command line (secrets masked) in the entry."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fairness.actions.audit import Actor, command_line_actor


class AuditedCommand(BaseCommand):
    _argv: list[str] | None = None
    _options: dict[str, Any] = {}

    def run_from_argv(self, argv: list[str]) -> None:
        self._argv = argv  # the command line as typed: manage.py and django-admin come this way
        super().run_from_argv(argv)

    def execute(self, *args: Any, **options: Any) -> str | None:
        self._options = options  # call_command() comes only this way
        return super().execute(*args, **options)

    def actor(self) -> Actor:
        return command_line_actor(self._argv or self.command_line(self._options))

    def command_line(self, options: dict[str, Any]) -> list[str]:
        """The command line that gives these options. call_command() has none of its own, and the
        process's (a test runner's, a worker's) would not say what was run."""
        parser = CommandParser(add_help=False)
        self.add_arguments(parser)
        argv = ["manage.py", self.__module__.rpartition(".")[2]]
        for action in parser._actions:
            value = options.get(action.dest, action.default)
            if value == action.default:
                continue
            values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
            flags = action.option_strings
            if not flags:
                argv += values
            elif action.nargs == 0:  # store_true and the like: the flag is the value
                negated = isinstance(action, argparse.BooleanOptionalAction) and not value
                argv.append(flags[-1] if negated else flags[0])
            else:
                flag = next((f for f in flags if f.startswith("--")), flags[0])
                repeat = isinstance(action, argparse._AppendAction)
                argv += [part for v in values for part in (flag, v)] if repeat else [flag, *values]
        return argv
