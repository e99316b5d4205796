//! Which watch events start a reconcile (oper8 F170–F177).
