"""TextWorld games: generated with the real ``textworld`` package, played on its engine
(docs/environments.md §10)."""
