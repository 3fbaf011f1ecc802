"""The protocol's validation table, applied by the agent before a record is spooled."""

from agent.validate import clean_process, clean_sample, process_is_valid

GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"


def sample(**fields):
    base = {"gpu_uuid": GPU, "util_gpu_avg": 50.0, "util_gpu_max": 90.0, "util_mem_avg": 10.0,
            "memory_used_bytes_avg": 100, "memory_used_bytes_max": 200, "power_w_avg": 300.0,
            "energy_j": 18000.0, "temp_c_max": 60, "ecc_uncorrected": 0, "ecc_corrected": 0}
    return {**base, **fields}


def clean(record, limit=700.0, total=1000, window_s=60):
    return clean_sample(record, memory_total_bytes=total, power_limit_w=limit, window_s=window_s)


def test_a_sample_in_range_is_untouched():
    record = sample()
    assert clean(record) == [] and record == sample()


def test_percentages_just_above_100_are_clamped_and_beyond_are_nulled():
    record = sample(util_gpu_avg=100.005, util_gpu_max=100.01, util_mem_avg=101.0)
    assert clean(record) == ["util_mem_avg"]
    assert record["util_gpu_avg"] == 100.0 and record["util_gpu_max"] == 100.0
    assert record["util_mem_avg"] is None


def test_an_average_above_its_maximum_is_nulled_not_the_maximum():
    record = sample(util_gpu_avg=95.0, util_gpu_max=90.0,
                    memory_used_bytes_avg=300, memory_used_bytes_max=200)
    assert clean(record) == ["util_gpu_avg", "memory_used_bytes_avg"]
    assert record["util_gpu_max"] == 90.0 and record["memory_used_bytes_max"] == 200


def test_memory_above_the_gpu_total_is_nulled():
    record = sample(memory_used_bytes_max=2000)
    assert clean(record) == ["memory_used_bytes_max"]
    assert record["memory_used_bytes_avg"] == 100  # the avg <= max rule is skipped on a null


def test_power_and_energy_are_bounded_by_three_times_the_limit():
    record = sample(power_w_avg=2101.0, energy_j=3 * 700 * 60 + 1)
    assert clean(record) == ["power_w_avg", "energy_j"]
    record = sample(power_w_avg=2100.0, energy_j=3 * 700 * 60)
    assert clean(record) == []


def test_without_a_known_power_limit_only_negative_power_is_nulled():
    record = sample(power_w_avg=99999.0, energy_j=-1.0)
    assert clean(record, limit=None) == ["energy_j"]


def test_temperature_and_ecc_ranges():
    record = sample(temp_c_max=151, ecc_corrected=-1)
    assert clean(record) == ["temp_c_max", "ecc_corrected"]
    assert clean(sample(temp_c_max=-40)) == []


def test_process_records_outside_the_table_are_dropped_or_nulled():
    record = {"gpu_uuid": GPU, "pid": 4194305, "user": "u" * 300, "command": "x" * 300,
              "util_sm_avg": 140.0, "memory_used_bytes_max": 5}
    assert not process_is_valid(record)
    assert not process_is_valid({**record, "pid": 10, "gpu_uuid": "GPU-nope"})
    assert process_is_valid({**record, "pid": 10})
    assert clean_process(record) == ["util_sm_avg", "user"]
    assert len(record["command"]) == 256 and record["user"] is None
