"""WebShop (docs/environments.md §6): the text shop with the exact reward, BM25 search, a seeded
synthetic catalogue in the original files' schema and the real data when a user has it."""
