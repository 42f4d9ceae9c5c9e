"""What may run unattended: the path policy, the protected table, rules, proposals and the judge.
Pure where it can be.
"""
