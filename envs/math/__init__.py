"""Tool-integrated math (spec environments §5): so far the sandbox that runs model-written code."""
