"""Across ranks: steps aligned between ranks (`align`), load imbalance (`imbalance`), and stragglers — who
arrives late at collectives (`straggler_arrivals`), why (`straggler_windows`, `straggler_late_rank`), with the
rows that show it (`straggler_evidence`) and the words (`straggler_text`)."""
