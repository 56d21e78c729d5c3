"""A Jinja2 environment configured exactly as transformers' apply_chat_template configures it.

transformers (src/transformers/utils/chat_template_utils.py, _compile_jinja_template) uses an
ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols
extension and an extension for the {% generation %} tag; it replaces the `tojson` filter with
json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys) and
adds the globals raise_exception (raises TemplateError) and strftime_now. This module rebuilds
that environment on Debian's python3-jinja2 for machines without transformers.
"""
import json
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body (span tracking is not needed
    for the text itself)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env
