//! Which replica may start reconciles (oper8 F178–F182).
