"""Prints, for every code object of a few standard modules, its line table and the line
CPython itself gives at each instruction position, one JSON object a line:
{"first": co_firstlineno, "table": hex, "lines": [[position, line or null], ...]}.
Positions are in the unit the profiler's walker records: bytes up to 3.9, code units
from 3.10."""
import json
import sys
import types

import argparse
import json.decoder
import threading


def codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)


def expected(code):
    version = sys.version_info[:2]
    if version <= (3, 9):
        table = code.co_lnotab
        starts = {}
        line = code.co_firstlineno
        address = 0
        # dis.findlinestarts skips pairs; build the line of every byte offset directly.
        import dis
        for offset, start_line in dis.findlinestarts(code):
            starts[offset] = start_line
        out = []
        current = code.co_firstlineno
        for offset in range(0, len(code.co_code), 2):
            if offset in starts:
                current = starts[offset]
            out.append([offset, current])
        return table, out
    if version == (3, 10):
        out = []
        for start, end, line in code.co_lines():
            for offset in range(start, end, 2):
                out.append([offset // 2, line])
        return code.co_linetable, out
    out = []
    for index, position in enumerate(code.co_positions()):
        out.append([index, position[0]])
    return code.co_linetable, out


def functions(module):
    for value in vars(module).values():
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            yield value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for member in vars(value).values():
                if isinstance(member, types.FunctionType):
                    yield member


for module in (argparse, json.decoder, threading):
    for function in functions(module):
        for code in codes(function.__code__):
            table, lines = expected(code)
            print(json.dumps({"first": code.co_firstlineno, "table": table.hex(), "lines": lines}))
