"""The Qwen chat format and its thinking switch, as a Jinja template for ``transformers``.

A conversation renders as ChatML blocks ``<|im_start|>{role}\\n{content}<|im_end|>\\n``. Qwen3's
conventions, which this template follows (our own wording of the same rules):

- an assistant reply may start with ``<think>…</think>``; that reasoning is kept only for replies
  after the last user message (the turn being continued) and dropped from earlier history;
- a ``tool`` message is shown to the model as a user block wrapping
  ``<tool_response>…</tool_response>`` (consecutive tool messages share one block);
- ``add_generation_prompt`` opens an assistant block; with ``enable_thinking=False`` it also
  writes an empty ``<think>\\n\\n</think>\\n\\n`` so the model answers without reasoning.

Model directories that ship their own template keep it; this one is used for tokenizers we build
(the tiny trained one, the converted Qwen vocabulary) and for directories that have none.
"""

from __future__ import annotations

from typing import Any

QWEN_CHAT_TEMPLATE = """\
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}
  {%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- for m in messages -%}
  {%- set content = m['content'] if m['content'] is string else '' -%}
  {%- if m['role'] == 'assistant' -%}
    {%- set reasoning = '' -%}
    {%- if m.get('reasoning_content') is string -%}
      {%- set reasoning = m['reasoning_content'] -%}
    {%- elif '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
      {%- set content = content.split('</think>')[-1] -%}
    {%- endif -%}
    {%- set reasoning = reasoning.strip('\\n') -%}
    {%- set content = content.lstrip('\\n') -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}
      {{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}
    {%- endif -%}
    {{- content + '<|im_end|>\\n' -}}
  {%- elif m['role'] == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}
      {{- '<|im_end|>\\n' -}}
    {%- endif -%}
  {%- elif m['role'] in ('system', 'user') -%}
    {{- '<|im_start|>' + m['role'] + '\\n' + content + '<|im_end|>\\n' -}}
  {%- else -%}
    {{- raise_exception('unknown chat role ' + m['role']
                        + '; use system, user, assistant or tool') -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}
    {{- '<think>\\n\\n</think>\\n\\n' -}}
  {%- endif -%}
{%- endif -%}
"""

Message = dict[str, Any]


def render_chat(
    tokenizer,
    messages: list[Message],
    *,
    add_generation_prompt: bool = True,
    enable_thinking: bool = True,
) -> str:
    """The prompt text of ``messages`` under the tokenizer's chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer has no chat_template; load it with load_tokenizer()")
    return tokenizer.apply_chat_template(
        messages,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
    )


def encode_chat(
    tokenizer,
    messages: list[Message],
    *,
    add_generation_prompt: bool = True,
    enable_thinking: bool = True,
) -> list[int]:
    """Token ids of the rendered conversation (no extra BOS/EOS: the template writes them all).

    Rendering to text and then encoding behaves the same on transformers 4.x and 5.x.
    """
    text = render_chat(
        tokenizer,
        messages,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
