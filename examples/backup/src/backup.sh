#!/bin/bash
# One backup of a PostgreSQL database: pg_dump, gzip, encrypt with the Backup's key,
# write it to the backup volume, then keep only the newest $RETENTION backups.
# Set by the operator: BACKUP_NAME BACKUP_DIR DB_HOST DB_PORT DB_NAME DB_USER DB_PASSWORD
# ENCRYPTION_KEY RETENTION.
set -euo pipefail

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
file="${BACKUP_DIR}/${BACKUP_NAME}-${stamp}.sql.gz.enc"
# A failed dump leaves nothing behind; a finished one is renamed into place.
trap 'rm -f -- "${file}.partial"' EXIT

PGPASSWORD="${DB_PASSWORD}" pg_dump --host "${DB_HOST}" --port "${DB_PORT}" \
    --username "${DB_USER}" --no-password "${DB_NAME}" \
  | gzip \
  | openssl enc -aes-256-cbc -pbkdf2 -salt -pass env:ENCRYPTION_KEY -out "${file}.partial"
mv "${file}.partial" "${file}"
echo "wrote ${file}"

# The stamps sort as they were taken, and so does the glob: oldest first. Everything but the
# newest $RETENTION goes.
backups=("${BACKUP_DIR}/${BACKUP_NAME}"-*.sql.gz.enc)
excess=$(( ${#backups[@]} - RETENTION ))
for old in "${backups[@]:0:$(( excess > 0 ? excess : 0 ))}"; do
  rm -f -- "${old}"
  echo "removed ${old}"
done
