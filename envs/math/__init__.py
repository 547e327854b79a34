"""Tool-integrated math (spec environments §5; docs/environments.md §8, §9): ``tir`` (the text
rules of the code-interpreter loop), ``env`` (episodes, code in the sandbox, scoring), ``sandbox``
(the isolated executor), ``answer`` and ``verify`` (extraction and the math-verify reward, with
``score_worker``), ``data`` (MATH and AIME problems), ``prompts`` and ``spec`` (registration)."""
