#!/usr/bin/env python3
"""Writes tests/chat_template/constructs.jsonl: one template construct per line, rendered by
Jinja2 configured as transformers configures it (jinja_env.py), for data/chat/template_test.cpp.

Each line: {"name", "template", "vars", "expected"} or, when Jinja2 refuses the template or
fails while rendering it, {"name", "template", "vars", "error": true}.
Usage: python3 tools/tokenizer/make_construct_goldens.py [OUT]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_env import make_environment  # noqa: E402

MSGS = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi ünï 😀"},
        {"role": "assistant", "content": "Hello!"}]

CASES = [
    # whitespace control: trim_blocks, lstrip_blocks, -, +
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip_not_output", "a\n    {{ 'x' }}\n", {}),
    ("minus_left", "a   \n  {%- if true %}b{% endif %}", {}),
    ("minus_right", "{% if true -%}   \n\n  b{% endif %}", {}),
    ("minus_output", "a  {{- 'b' -}}  c", {}),
    ("plus_keeps", "a\n    {%+ if true %}b{% endif %}", {}),
    ("comment", "a\n  {# note #}\nb {#- x -#} c", {}),
    ("trailing_newline", "x\n", {}),
    ("crlf", "a\r\nb\rc", {}),
    ("raw", "{% raw %}{{ not parsed }}{% endraw %}", {}),
    # output of values
    ("print_values", "{{ none }} {{ true }} {{ 1 }} {{ 1.5 }} {{ 2.0 }} {{ 1e20 }} {{ 0.1 }} {{ -3 }}", {}),
    ("print_list", "{{ [1, 'a', none, true, 2.5] }}", {}),
    ("print_dict", "{{ {'a': 1, 'b': [1, 2], 'c': \"it's\"} }}", {}),
    ("print_tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }}", {}),
    ("print_undefined", "[{{ nothing }}]", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\u00e9\\x41' }}|{{ \"q\\\"q\" }}", {}),
    ("string_concat_literals", "{{ 'a' 'b' }}", {}),
    # arithmetic and operators
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}", {}),
    ("float_arith", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 4 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 3 }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ [1,2] < [1,3] }}", {}),
    ("in_not_in", "{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or '' or 'z' }} {{ 1 and 0 }}", {}),
    ("ternary", "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}]", {}),
    ("unary", "{{ -(3) }} {{ +4 }} {{ not true }} {{ -1.5 }}", {}),
    ("bool_int", "{{ true + 1 }} {{ true == 1 }}", {}),
    # subscripts and slices
    ("getitem", "{{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages[1]['content'][0] }}", {"messages": MSGS}),
    ("slices", "{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][5:] }} {{ 'héllo'[1:] }}", {}),
    ("missing_item", "[{{ messages[0].nope }}][{{ messages[9] }}][{{ {}['x'] is defined }}]", {"messages": MSGS}),
    ("dot_number", "{{ messages.0.role }}", {"messages": MSGS}),
    # statements
    ("if_elif_else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_if", "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{{ loop.length }} {% endfor %}", {"messages": MSGS}),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", {}),
    ("for_dict", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("for_undefined", "{% for x in nothing %}x{% endfor %}ok", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loop", "{% for a in [1,2] %}{% for b in [3,4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("set_in_if", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set block %}  hello {{ 1 }}  {% endset %}[{{ block }}]", {}),
    ("set_block_filter", "{% set block | upper | trim %}  hello  {% endset %}[{{ block }}]", {}),
    ("namespace", "{% set ns = namespace(count=0, last=none) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.count }} {{ ns.last }}", {"messages": MSGS}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_missing_arg", "{% macro f(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ f(1) }}", {}),
    ("macro_recursion", "{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(4) }}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro f() %}{{ g }}{{ bos_token }}{% endmacro %}{{ f() }}", {"bos_token": "<s>"}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("generation", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}", {"messages": MSGS}),
    # tests
    ("tests_types", "{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ true is number }} {{ true is integer }}", {"x": 1}),
    ("tests_values", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is equalto 1 }} {{ 2 is eq 2 }} {{ true is true }} {{ false is false }} {{ 0 is false }} {{ 'a' is in 'abc' }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 3 is ge 3 }} {{ 3 is le 2 }} {{ 3 is ne 2 }}", {}),
    ("tests_not", "{{ x is not none }} {{ x is not defined }} {{ not x is defined }}", {"x": None}),
    ("tests_case", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ range is callable }} {{ none is sameas none }}", {}),
    # filters
    ("filter_trim", "[{{ '  a b \\n' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ nothing | trim }}]", {}),
    ("filter_length", "{{ 'héllo' | length }} {{ [1,2] | length }} {{ {'a':1} | count }} {{ nothing | length }}", {}),
    ("filter_first_last", "{{ [1,2,3] | first }} {{ [1,2,3] | last }} {{ 'abc' | first }} [{{ [] | first }}]", {}),
    ("filter_join", "{{ [1, 'a', none] | join(', ') }} {{ messages | map(attribute='role') | join('/') }} {{ messages | join(',', attribute='role') }}", {"messages": MSGS}),
    ("filter_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }}", {}),
    ("filter_case", "{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello wORLD-x(y' | title }} {{ 'hELLO world' | capitalize }}", {}),
    ("filter_default", "{{ nothing | default('d') }} {{ '' | default('e') }} {{ '' | default('f', true) }} {{ 0 | d('g', boolean=true) }} {{ none | default('h') }}", {}),
    ("filter_items", "{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}{{ v }}{% endfor %}{% for x in nothing | items %}x{% endfor %}", {}),
    ("filter_list_string", "{{ 'ab' | list }} {{ 12 | string }} {{ ({'a': 1} | list) }}", {}),
    ("filter_int_float", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '1.5' | float }} {{ 2 | float }} {{ 'ff' | int(base=16) }}", {}),
    ("filter_abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ 5 | round }}", {}),
    ("filter_unique", "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A'] | unique(true) | list }}", {}),
    ("filter_reverse_sort", "{{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3,1,2] | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | list }}", {"messages": MSGS}),
    ("filter_selectattr", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ messages | rejectattr('role', 'eq', 'user') | list | length }} {{ [{'a': 1}, {'a': 0}, {}] | selectattr('a') | list }}", {"messages": MSGS}),
    ("filter_select", "{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 0, 2] | select | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ [1, 5, 9] | select('gt', 4) | list }}", {}),
    ("filter_map_filter", "{{ ['a', 'b'] | map('upper') | list }} {{ [' a ', 'b '] | map('trim') | join }} {{ messages | map(attribute='nope', default='-') | join }}", {"messages": MSGS}),
    ("filter_safe_escape", "{{ '<b>' | safe }} {{ '<a href=\"x\">&\\'' | e }} {{ '<x>' | escape }}", {}),
    ("filter_tojson", "{{ {'a': [1, 2.5, none, true], 'b': 'é\"\\n<>&'} | tojson }}", {}),
    ("filter_tojson_args", "{{ {'a': {'b': [1, {}], 'c': []}} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ 'é' | tojson(ensure_ascii=true) }}", {}),
    ("filter_tojson_tools", "{% for t in tools %}{{ t | tojson }}\n{% endfor %}", {"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather 🌤", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
    ("filter_indent", "[{{ 'a\\nb\\n\\nc' | indent }}][{{ 'a\\nb' | indent(2, true) }}][{{ 'a\\n\\nb' | indent(2, blank=true) }}][{{ 'x\\ny' | indent('> ') }}]", {}),
    ("filter_wordcount", "{{ 'hello big, world_1 é' | wordcount }}", {}),
    ("filter_sum_min_max", "{{ [1, 2, 3] | sum }} {{ [1, 2] | sum(start=10) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | min }}", {}),
    ("filter_dictsort", "{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}),
    ("filter_center", "[{{ 'ab' | center(6) }}]", {}),
    # string methods
    ("str_affix", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}", {}),
    ("str_strip", "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\nhi\\n'.lstrip('\\n') }}][{{ '\\u3000a\\xa0'.strip() }}]", {}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b c  '.split(none, 1) }} {{ '  a b c  '.rsplit(none, 1) }} {{ 'x</think>y'.split('</think>')[-1] }}", {}),
    ("str_replace_case", "{{ 'aXa'.replace('a', 'b') }} {{ 'AbC'.upper() }} {{ 'AbC'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'AbC'.swapcase() }}", {}),
    ("str_find", "{{ 'héllo'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }}", {}),
    ("str_join_format", "{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}'.format('y') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}", {}),
    ("str_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }}", {}),
    ("str_splitlines", "{{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("str_pad", "[{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4) }}][{{ '7'.zfill(3) }}][{{ 'a=b'.partition('=') }}]", {}),
    # dict and list methods
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }}", {"d": {"a": 1, "b": 2}}),
    ("dict_attr_vs_item", "{{ d['items'] }} {{ d.x }}", {"d": {"items": "I", "x": "X"}}),
    ("list_methods", "{{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }}", {}),
    # globals
    ("range", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b=2) }}", {}),
    # chat-template idioms
    ("content_string_or_list", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}{% endif %}|{% endfor %}", {"messages": [{"role": "user", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t1"}, {"type": "image"}, {"type": "text", "text": "t2"}]}]}),
    ("reverse_index", "{% set ns = namespace(idx=messages|length - 1) %}{% for m in messages[::-1] %}{% set i = (messages|length - 1) - loop.index0 %}{% if ns.idx == messages|length - 1 and m.role == 'user' %}{% set ns.idx = i %}{% endif %}{% endfor %}{{ ns.idx }}", {"messages": MSGS + [{"role": "user", "content": "again"}]}),
    ("tool_calls", "{% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}{{ tc.name }}({{ tc.arguments | tojson }}){% endfor %}{% endif %}{% endfor %}", {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": "é"}}}]}]}),
    # errors (Jinja2 refuses these; shardtrain must too)
    ("error_raise", "{{ raise_exception('bad role') }}", {}),
    ("error_undefined_attr", "{{ nothing.attr }}", {}),
    ("error_undefined_add", "{{ nothing + 1 }}", {}),
    ("error_str_plus_int", "{{ 'a' + 1 }}", {}),
    ("error_unknown_filter", "{{ 'a' | nosuchfilter }}", {}),
    ("error_unknown_test", "{{ 'a' is nosuchtest }}", {}),
    ("error_unclosed", "{% if true %}x", {}),
    ("error_syntax", "{{ 1 + }}", {}),
    ("error_include", "{% include 'x' %}", {}),
    ("error_mutation", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("error_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("error_zero_div", "{{ 1 / 0 }}", {}),
    ("error_ns_assign", "{% set x = 1 %}{% set x.y = 2 %}", {}),
    ("error_split_filter", "{{ 'a b' | split }}", {}),
    ("error_tojson_undefined", "{{ nothing | tojson }}", {}),
]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "chat_template",
        "constructs.jsonl")
    env = make_environment()
    lines = []
    for name, source, variables in CASES:
        record = {"name": name, "template": source, "vars": variables}
        try:
            record["expected"] = env.from_string(source).render(**variables)
        except Exception:  # noqa: BLE001 - any refusal is an expected error
            record["error"] = True
        if name.startswith("error_") != ("error" in record):
            raise SystemExit(f"case {name}: expected {'an error' if name.startswith('error_') else 'output'}")
        lines.append(json.dumps(record, ensure_ascii=False))
    with open(out_path + ".partial", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(out_path + ".partial", out_path)
    print(f"make_construct_goldens: {len(lines)} cases -> {out_path}")


if __name__ == "__main__":
    main()
