# Sourced by a long-job GPU script after it sets W (its work folder), M (the models folder) and WHO (its name): the
# work folder, the machine's card and RAM in the log, and the 50-block INT8 checkpoint written once (its page cache
# dropped for a 32 GiB host RAM limit). Exits the script when the checkpoint cannot be written.
unset OUT
mkdir -p "$W"
echo "$WHO: start $(date +%T)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
grep -E "MemTotal|MemAvailable|SwapTotal" /proc/meminfo
python3 -m bench.long_job --prepare --blocks 50 --out "$W" --models "$M" --host-ram-gb 32 || exit 1
