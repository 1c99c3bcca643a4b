"""Credit: rewards and advantages, from a round's tables to one advantage per step.

`advantages` is the estimators (pure numpy/pandas); `rubrics` score the rollouts; `reward_model` with
`implicit_prm` and `progress_model` are the step-reward models of PRIME and SPA; `sample_filter` is PROF's
filter; `gold_answer` is IGPO's teacher-forced pass; `round_advantages` is stage 3 as the round and
`creditline advantages` compute it; `rescore` compares two scorings; `credit_plot` draws the credit picture.
"""
